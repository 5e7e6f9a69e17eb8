package main

import "testing"

func TestHostsFile(t *testing.T) {
	got, err := hostsFile("web-0", "web.shop.svc.cluster.local", "10.244.1.9,fd00::9", `[{"ip":"10.1.2.3","hostnames":["db","db.local"]}]`)
	if err != nil {
		t.Fatal(err)
	}
	// As the kubelet writes it (managedHostsFileContent).
	want := "# Kubernetes-managed hosts file.\n" +
		"127.0.0.1\tlocalhost\n" +
		"::1\tlocalhost ip6-localhost ip6-loopback\n" +
		"fe00::0\tip6-localnet\n" +
		"fe00::0\tip6-mcastprefix\n" +
		"fe00::1\tip6-allnodes\n" +
		"fe00::2\tip6-allrouters\n" +
		"10.244.1.9\tweb-0.web.shop.svc.cluster.local\tweb-0\n" +
		"fd00::9\tweb-0.web.shop.svc.cluster.local\tweb-0\n" +
		"\n# Entries added by HostAliases.\n" +
		"10.1.2.3\tdb\tdb.local\n"
	if string(got) != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}

	for name, args := range map[string][4]string{
		"no hostname":     {"", "d", "10.0.0.1", ""},
		"no IP yet":       {"h", "d", "", ""},
		"not an IP":       {"h", "d", "10.0.0.1,web", ""},
		"aliases garbled": {"h", "d", "10.0.0.1", "[{"},
	} {
		if _, err := hostsFile(args[0], args[1], args[2], args[3]); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
