package iphold_test

import (
	"net/netip"
	"testing"

	"github.com/kubenest-io/kubenest/internal/iphold"
)

// TestAddresses checks that the addresses held are the ones the host's allocator gives out.
func TestAddresses(t *testing.T) {
	for _, tc := range []struct {
		cidr        string
		n           int
		first, last string
	}{
		{"10.254.2.0/24", 254, "10.254.2.1", "10.254.2.254"},
		{"10.254.2.16/28", 14, "10.254.2.17", "10.254.2.30"},
		{"10.254.2.7/28", 14, "10.254.2.1", "10.254.2.14"}, // not masked: its network's
		{"10.240.0.0/20", 4094, "10.240.0.1", "10.240.15.254"},
		{"fd00:10::/124", 15, "fd00:10::1", "fd00:10::f"}, // IPv6 has no broadcast address
	} {
		got := iphold.Addresses(netip.MustParsePrefix(tc.cidr))
		if len(got) != tc.n || got[0].String() != tc.first || got[len(got)-1].String() != tc.last {
			t.Errorf("%s: %d addresses, %v to %v; want %d, %s to %s", tc.cidr, len(got), got[0], got[len(got)-1], tc.n, tc.first, tc.last)
		}
	}
	if got := iphold.Addresses(netip.MustParsePrefix("10.240.0.0/19")); got != nil {
		t.Errorf("a /19 (8190 addresses): %d addresses, want none (too many to hold)", len(got))
	}
}
