package portal

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestSealer(t *testing.T) {
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	key := bytes.Repeat([]byte("k"), 32)
	s, err := NewSealer(key)
	if err != nil {
		t.Fatal(err)
	}
	in := Session{User: "alice@example.com", Groups: []string{"dev", "system:authenticated"},
		Extra: map[string][]string{"scopes": {"a"}}, Expires: now.Add(time.Hour), CSRF: "tok"}
	v, err := s.Seal(in)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(v, "alice") {
		t.Error("the sealed value shows the user")
	}
	got, err := s.Open(v, now)
	if err != nil || got.User != in.User || len(got.Groups) != 2 || got.Extra["scopes"][0] != "a" || got.CSRF != "tok" {
		t.Errorf("Open: %+v, %v", got, err)
	}
	if v2, _ := s.Seal(in); v2 == v {
		t.Error("two seals of one session are equal: the nonce is not random")
	}

	for name, tc := range map[string]struct {
		value string
		at    time.Time
		want  error
	}{
		"expired":         {v, now.Add(time.Hour), ErrSessionExpired},
		"flipped byte":    {v[:10] + flip(v[10]) + v[11:], now, ErrSessionInvalid},
		"truncated":       {v[:len(v)-3], now, ErrSessionInvalid},
		"not base64":      {"!!!", now, ErrSessionInvalid},
		"empty":           {"", now, ErrSessionInvalid},
		"another key":     {sealWith(t, bytes.Repeat([]byte("o"), 32), in), now, ErrSessionInvalid},
		"no user inside":  {sealWith(t, key, Session{CSRF: "x", Expires: now.Add(time.Hour)}), now, ErrSessionInvalid},
		"no CSRF inside":  {sealWith(t, key, Session{User: "u", Expires: now.Add(time.Hour)}), now, ErrSessionInvalid},
		"expired at once": {sealWith(t, key, Session{User: "u", CSRF: "x", Expires: now}), now, ErrSessionExpired},
	} {
		if _, err := s.Open(tc.value, tc.at); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", name, err, tc.want)
		}
	}

	if _, err := NewSealer([]byte("short")); err == nil || !strings.Contains(err.Error(), "at least 32") {
		t.Errorf("short key: %v", err)
	}
	big := in
	big.Groups = make([]string, 400)
	for i := range big.Groups {
		big.Groups[i] = "group-with-a-long-name"
	}
	if _, err := s.Seal(big); err == nil || !strings.Contains(err.Error(), "does not fit in a cookie") {
		t.Errorf("oversized session: %v", err)
	}
}

func TestSameToken(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want bool
	}{{"x", "x", true}, {"x", "y", false}, {"", "", false}, {"x", "", false}, {"xy", "x", false}} {
		if got := sameToken(tc.a, tc.b); got != tc.want {
			t.Errorf("sameToken(%q, %q) = %v", tc.a, tc.b, got)
		}
	}
}

func flip(c byte) string {
	if c == 'A' {
		return "B"
	}
	return "A"
}

func sealWith(t *testing.T, key []byte, s Session) string {
	t.Helper()
	k, err := NewSealer(key)
	if err != nil {
		t.Fatal(err)
	}
	v, err := k.Seal(s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
