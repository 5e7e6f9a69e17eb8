package portal

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Session is who signed in, as the host's TokenReview said, and until when. It is all the
// portal keeps of a user, sealed in a cookie: never the bearer token they signed in with.
type Session struct {
	// User, Groups and Extra are the host's view of the user, impersonated on every request.
	User   string              `json:"u"`
	Groups []string            `json:"g,omitempty"`
	Extra  map[string][]string `json:"x,omitempty"`
	// Expires is when the session ends; the user signs in again.
	Expires time.Time `json:"e"`
	// CSRF is the token every form of this session must carry.
	CSRF string `json:"c"`
	// Namespaces the user opened by name, remembered so the list shows them.
	Namespaces []string `json:"n,omitempty"`
}

// Errors of opening a session cookie.
var (
	ErrSessionInvalid = errors.New("session cookie is not one this portal sealed")
	ErrSessionExpired = errors.New("session expired")
)

// maxCookieSize is what browsers keep of one cookie; a session of a user with very many groups
// does not fit.
const maxCookieSize = 4000

// Sealer seals sessions into cookie values with AES-256-GCM: the value is confidential and
// any change to it is detected. The key is derived from a secret of any length.
type Sealer struct {
	aead cipher.AEAD
}

// NewSealer derives the sealing key from secret, which must have at least 32 bytes.
func NewSealer(secret []byte) (*Sealer, error) {
	if len(secret) < 32 {
		return nil, fmt.Errorf("session key has %d bytes, needs at least 32", len(secret))
	}
	key := sha256.Sum256(append([]byte("kubenest-portal-session-v1\x00"), secret...))
	block, err := aes.NewCipher(key[:])
	if err != nil {
		return nil, fmt.Errorf("session cipher: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("session cipher: %w", err)
	}
	return &Sealer{aead: aead}, nil
}

// Seal returns the cookie value of s.
func (k *Sealer) Seal(s Session) (string, error) {
	return k.seal(s, cookieName)
}

// seal encodes v as JSON and seals it, bound to the cookie name.
func (k *Sealer) seal(v any, name string) (string, error) {
	plain, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("encoding cookie %s: %w", name, err)
	}
	nonce := make([]byte, k.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return "", fmt.Errorf("cookie nonce: %w", err)
	}
	out := base64.RawURLEncoding.EncodeToString(k.aead.Seal(nonce, nonce, plain, []byte(name)))
	if len(out) > maxCookieSize {
		return "", fmt.Errorf("session of %d bytes does not fit in a cookie (too many groups or extra attributes)", len(out))
	}
	return out, nil
}

// Open reads a cookie value back: ErrSessionInvalid when it was not sealed with this key or
// was changed, ErrSessionExpired when it is past its expiry at now.
func (k *Sealer) Open(value string, now time.Time) (Session, error) {
	var s Session
	if err := k.open(value, cookieName, &s); err != nil || s.User == "" || s.CSRF == "" {
		return Session{}, ErrSessionInvalid
	}
	if !now.Before(s.Expires) {
		return s, ErrSessionExpired
	}
	return s, nil
}

// open reads a value sealed for the cookie name into v.
func (k *Sealer) open(value, name string, v any) error {
	raw, err := base64.RawURLEncoding.DecodeString(value)
	if err != nil || len(raw) < k.aead.NonceSize() {
		return ErrSessionInvalid
	}
	nonce, sealed := raw[:k.aead.NonceSize()], raw[k.aead.NonceSize():]
	plain, err := k.aead.Open(nil, nonce, sealed, []byte(name))
	if err != nil || json.Unmarshal(plain, v) != nil {
		return ErrSessionInvalid
	}
	return nil
}

// randomToken is 32 random bytes, URL-safe.
func randomToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("random token: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// sameToken compares two CSRF tokens in constant time; an empty one never matches.
func sameToken(a, b string) bool {
	return a != "" && b != "" && subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}
