package etcdsnapshot

import (
	"net/netip"
	"strings"
	"testing"
)

func TestMoveAddress(t *testing.T) {
	from, to := netip.MustParsePrefix("10.254.3.0/24"), netip.MustParsePrefix("10.254.7.0/24")
	for _, tt := range []struct{ in, want, err string }{
		{in: "10.254.3.1", want: "10.254.7.1"},
		{in: "10.254.3.10", want: "10.254.7.10"},
		{in: "10.254.3.255", want: "10.254.7.255"},
		{in: "None", want: "None"},
		{in: "", want: ""},
		{in: "fd00::1", want: "fd00::1"},
		{in: "10.96.0.1", err: "outside the snapshot's Service range"},
		{in: "banana", err: "ParseAddr"},
	} {
		got, err := MoveAddress(tt.in, from, to)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("MoveAddress(%q) = %q, %v; want an error saying %q", tt.in, got, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("MoveAddress(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
	if got, err := MoveAddress("10.254.3.200", from, netip.MustParsePrefix("10.254.8.0/25")); err == nil {
		t.Errorf("an offset beyond a smaller range: %q, no error", got)
	}
	if got, _ := MoveAddress("10.254.3.200", netip.MustParsePrefix("10.254.0.0/16"), netip.MustParsePrefix("10.255.0.0/16")); got != "10.255.3.200" {
		t.Errorf("a /16: %q", got)
	}
}

func TestHumanSize(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 912: "912", 303136: "296Ki", 2202009: "2.1Mi", 5 << 30: "5.0Gi"} {
		if got := HumanSize(n); got != want {
			t.Errorf("HumanSize(%d) = %q, want %q", n, got, want)
		}
	}
}
