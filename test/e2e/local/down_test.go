package main

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// A node's cached CNI results name its pods' network namespaces and their loopback twins;
// down removes those and nothing of another node's or of a namespace outside containerd's.
func TestPodNetworkResults(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("kn-worker-1-aaa-eth0", `{"kind":"cniCacheV1","containerId":"aaa","networkName":"kn-worker-1",
		"result":{"interfaces":[{"name":"cni0"},{"name":"veth1"},{"name":"eth0","sandbox":"/var/run/netns/cni-1111"}]}}`)
	write("cni-loopback-aaa-lo", `{"containerId":"aaa","result":{"interfaces":[{"name":"lo","sandbox":"/var/run/netns/cni-1111"}]}}`)
	// A result that names a path outside /run/netns: its cache goes, nothing else.
	write("kn-worker-1-bbb-eth0", `{"containerId":"bbb","result":{"interfaces":[{"name":"eth0","sandbox":"/var/run/netns/../../etc"}]}}`)
	write("kn-worker-1-ccc-eth0", `not json`)
	write("kn-worker-10-ddd-eth0", `{"containerId":"ddd","result":{"interfaces":[{"name":"eth0","sandbox":"/run/netns/cni-4444"}]}}`)
	write("cni-loopback-eee-lo", `{"containerId":"eee","result":{"interfaces":[{"name":"lo","sandbox":"/var/run/netns/cni-5555"}]}}`)

	got := podNetworkResults(dir, "kn-worker-1")
	var netns, files []string
	for _, pn := range got {
		if pn.netns != "" {
			netns = append(netns, pn.netns)
		}
		for _, f := range pn.files {
			files = append(files, filepath.Base(f))
		}
	}
	slices.Sort(files)
	if want := []string{"/var/run/netns/cni-1111"}; !slices.Equal(netns, want) {
		t.Errorf("namespaces to remove: %v, want %v", netns, want)
	}
	// Not kn-worker-10's, nor a loopback result whose pod was not this node's.
	if want := []string{"cni-loopback-aaa-lo", "cni-loopback-bbb-lo", "kn-worker-1-aaa-eth0", "kn-worker-1-bbb-eth0", "kn-worker-1-ccc-eth0"}; !slices.Equal(files, want) {
		t.Errorf("cache files to remove: %v, want %v", files, want)
	}
}
