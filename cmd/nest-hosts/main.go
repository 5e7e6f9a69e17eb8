// Command nest-hosts writes a tenant pod's /etc/hosts as the tenant's kubelet would. clustertree
// runs it as the first init container of the host pod of a tenant pod with a subdomain: the
// host's kubelet would name the host's namespace and cluster domain in the pod's FQDN line,
// and only once the pod has its IP can the line be written. Every container of the host pod
// mounts the file at /etc/hosts, so the host's kubelet leaves /etc/hosts to it.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"strings"

	"github.com/kubenest-io/kubenest/internal/atomicfile"
)

// hostAlias is a pod's spec.hostAliases entry.
type hostAlias struct {
	IP        string   `json:"ip"`
	Hostnames []string `json:"hostnames"`
}

func main() {
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), `Usage: nest-hosts --file F --hostname H --domain D --pod-ips IPS [--host-aliases JSON]

Writes a pod's hosts file as a kubelet does: localhost, "<pod IP> <hostname>.<domain> <hostname>"
for each pod IP, then the pod's host aliases. KubeNest's clustertree runs it in the host pod of a
tenant pod with a subdomain, so that the FQDN names the tenant's namespace and cluster domain.

`)
		flag.PrintDefaults()
	}
	file := flag.String("file", "", "the file to write: a volume every container of the pod mounts at /etc/hosts")
	hostname := flag.String("hostname", "", "the pod's hostname")
	domain := flag.String("domain", "", "the pod's domain, <subdomain>.<namespace>.svc.<cluster domain>; empty, no FQDN")
	podIPs := flag.String("pod-ips", "", "the pod's IPs, comma-separated, as the downward API's status.podIPs gives them")
	aliases := flag.String("host-aliases", "", `the pod's spec.hostAliases as JSON, [{"ip":"10.1.2.3","hostnames":["a","b"]}]`)
	flag.Parse()

	content, err := hostsFile(*hostname, *domain, *podIPs, *aliases)
	if err == nil && *file == "" {
		err = fmt.Errorf("--file: required")
	}
	if err == nil {
		err = atomicfile.Write(*file, content, 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "nest-hosts:", err)
		os.Exit(2)
	}
	fmt.Printf("nest-hosts: wrote %s for %s\n", *file, strings.TrimSuffix(*hostname+"."+*domain, "."))
}

// hostsFile is the kubelet's managed hosts file (its managedHostsFileContent) for the pod.
func hostsFile(hostname, domain, podIPs, aliasesJSON string) ([]byte, error) {
	if hostname == "" {
		return nil, fmt.Errorf("--hostname: required")
	}
	var ips []string
	for _, s := range strings.Split(podIPs, ",") {
		ip := strings.TrimSpace(s)
		if _, err := netip.ParseAddr(ip); err != nil {
			return nil, fmt.Errorf("--pod-ips %q: %w", podIPs, err)
		}
		ips = append(ips, ip)
	}
	var aliases []hostAlias
	if aliasesJSON != "" {
		if err := json.Unmarshal([]byte(aliasesJSON), &aliases); err != nil {
			return nil, fmt.Errorf("--host-aliases: %w", err)
		}
	}
	var b bytes.Buffer
	b.WriteString("# Kubernetes-managed hosts file.\n")
	b.WriteString("127.0.0.1\tlocalhost\n")
	b.WriteString("::1\tlocalhost ip6-localhost ip6-loopback\n")
	b.WriteString("fe00::0\tip6-localnet\n")
	b.WriteString("fe00::0\tip6-mcastprefix\n")
	b.WriteString("fe00::1\tip6-allnodes\n")
	b.WriteString("fe00::2\tip6-allrouters\n")
	for _, ip := range ips {
		if domain != "" {
			fmt.Fprintf(&b, "%s\t%s.%s\t%s\n", ip, hostname, domain, hostname)
		} else {
			fmt.Fprintf(&b, "%s\t%s\n", ip, hostname)
		}
	}
	if len(aliases) > 0 {
		b.WriteString("\n# Entries added by HostAliases.\n")
		for _, a := range aliases {
			fmt.Fprintf(&b, "%s\t%s\n", a.IP, strings.Join(a.Hostnames, "\t"))
		}
	}
	return b.Bytes(), nil
}
