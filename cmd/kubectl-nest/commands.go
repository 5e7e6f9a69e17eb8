package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/internal/atomicfile"
	"github.com/kubenest-io/kubenest/pkg/kubeconfig"
)

// notFound: the virtual cluster does not exist.
type notFound struct{ error }

// portalEnv names the portal's address when --portal is not given.
const portalEnv = "KUBENEST_PORTAL"

func (c *cli) listCommand() *cobra.Command {
	var all bool
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List the virtual clusters of a namespace, or of all namespaces you may see (-A)",
		Example: "  kubectl nest list -n team-a\n  kubectl nest list -A",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			ns := ""
			if !all {
				if ns, err = c.namespace(); err != nil {
					return err
				}
			}
			list := &v1alpha1.VirtualClusterList{}
			if err := cl.List(cmd.Context(), list, client.InNamespace(ns)); err != nil {
				return fmt.Errorf("listing virtual clusters: %w", err)
			}
			if len(list.Items) == 0 {
				if all {
					fmt.Fprintln(c.ErrOut, "No virtual clusters found.")
				} else {
					fmt.Fprintf(c.ErrOut, "No virtual clusters found in namespace %s.\n", ns)
				}
				return nil
			}
			w := tabwriter.NewWriter(c.Out, 0, 8, 3, ' ', 0)
			if all {
				fmt.Fprint(w, "NAMESPACE\t")
			}
			fmt.Fprintln(w, "NAME\tPHASE\tREADY\tENDPOINT\tVERSION\tLENT NODES\tAGE")
			for _, vc := range list.Items {
				if all {
					fmt.Fprintf(w, "%s\t", vc.Namespace)
				}
				ready := "Unknown"
				if cond := meta.FindStatusCondition(vc.Status.Conditions, v1alpha1.ConditionReady); cond != nil {
					ready = string(cond.Status)
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%d\t%s\n", vc.Name, or(string(vc.Status.Phase), "Pending"), ready,
					or(vc.Status.Endpoint, "<none>"), or(vc.Status.Version, "<none>"), len(vc.Status.Nodes),
					duration.HumanDuration(time.Since(vc.CreationTimestamp.Time)))
			}
			return w.Flush()
		},
	}
	cmd.Flags().BoolVarP(&all, "all-namespaces", "A", false, "List the virtual clusters of every namespace you may list them in.")
	return cmd
}

// credentials are how a kubeconfig for a virtual cluster is obtained.
type credentials struct {
	personal bool
	portal   string
}

func (p *credentials) addFlags(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&p.personal, "personal", false, "A personal kubeconfig instead of the admin one: a client certificate for you alone, "+
		"signed by the virtual cluster's CA and valid for hours, minted by KubeNest's portal (--portal), which checks that the host lets you "+
		"create virtualclusters/kubeconfig in the namespace. Your kubeconfig's user must authenticate with a bearer token (a ServiceAccount "+
		"token or an OIDC ID token): the portal checks who you are with it.")
	cmd.Flags().StringVar(&p.portal, "portal", os.Getenv(portalEnv), "The portal's address for --personal, such as https://portal.example.com (default $"+portalEnv+").")
}

// kubeconfigFor reads the kubeconfig of the virtual cluster name: the admin one from its Secret, or a
// personal one from the portal. Either is checked and rebuilt (kubeconfig.Clean): the Secret
// is in a namespace others may write, and the portal is only an address.
func (c *cli) kubeconfigFor(ctx context.Context, name string, p credentials) (*v1alpha1.VirtualCluster, []byte, error) {
	var portal *url.URL
	if p.personal {
		var err error
		if portal, err = portalURL(p.portal); err != nil {
			return nil, nil, err
		}
	}
	cl, err := c.client()
	if err != nil {
		return nil, nil, err
	}
	vc, err := c.getVC(ctx, cl, name)
	if err != nil {
		return nil, nil, err
	}
	if vc.Status.Endpoint == "" || vc.Status.KubeconfigSecretRef == nil {
		return nil, nil, fmt.Errorf("virtual cluster %s/%s has no endpoint or kubeconfig yet (phase %s): kubectl nest wait %s -n %s",
			vc.Namespace, vc.Name, or(string(vc.Status.Phase), "Pending"), vc.Name, vc.Namespace)
	}
	var data []byte
	if p.personal {
		data, err = c.personalKubeconfig(ctx, vc, portal)
	} else {
		data, err = adminKubeconfig(ctx, cl, vc)
	}
	if err != nil {
		return nil, nil, err
	}
	if data, err = kubeconfig.Clean(data, vc.Status.Endpoint); err != nil {
		return nil, nil, fmt.Errorf("the kubeconfig of %s/%s is not one KubeNest wrote, so it is not used: %w", vc.Namespace, vc.Name, err)
	}
	return vc, data, nil
}

func (c *cli) getVC(ctx context.Context, cl client.Client, name string) (*v1alpha1.VirtualCluster, error) {
	ns, err := c.namespace()
	if err != nil {
		return nil, err
	}
	vc := &v1alpha1.VirtualCluster{}
	err = cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, vc)
	if apierrors.IsNotFound(err) {
		return nil, notFound{fmt.Errorf("there is no virtual cluster %s in namespace %s (kubectl nest list -A shows the ones you may see; -n picks the namespace)", name, ns)}
	}
	if err != nil {
		return nil, fmt.Errorf("reading virtual cluster %s/%s: %w", ns, name, err)
	}
	return vc, nil
}

func adminKubeconfig(ctx context.Context, cl client.Client, vc *v1alpha1.VirtualCluster) ([]byte, error) {
	ref := vc.Status.KubeconfigSecretRef
	s := &corev1.Secret{}
	if err := cl.Get(ctx, client.ObjectKey{Namespace: vc.Namespace, Name: ref.Name}, s); err != nil {
		if apierrors.IsForbidden(err) {
			return nil, fmt.Errorf("you may not read the admin kubeconfig Secret %s/%s (it takes get on secrets there); --personal asks the portal for one of your own", vc.Namespace, ref.Name)
		}
		return nil, fmt.Errorf("reading the admin kubeconfig Secret %s/%s: %w", vc.Namespace, ref.Name, err)
	}
	data, ok := s.Data[ref.Key]
	if !ok {
		return nil, fmt.Errorf("the Secret %s/%s has no key %q yet: kubectl nest wait %s -n %s", vc.Namespace, ref.Name, ref.Key, vc.Name, vc.Namespace)
	}
	return data, nil
}

// personalKubeconfig asks the portal at base (checked by portalURL) to mint a personal
// kubeconfig, with the host kubeconfig's credentials: its bearer token (or the token its exec
// plugin or auth provider gives), added by client-go as for any request to the host.
func (c *cli) personalKubeconfig(ctx context.Context, vc *v1alpha1.VirtualCluster, base *url.URL) ([]byte, error) {
	u := *base
	cfg, err := c.flags.ToRESTConfig()
	if err != nil {
		return nil, err
	}
	if cfg.BearerToken == "" && cfg.BearerTokenFile == "" && cfg.ExecProvider == nil && cfg.AuthProvider == nil {
		return nil, errors.New("--personal: the portal checks who you are by a bearer token, and your kubeconfig's user has none " +
			"(it signs in with a client certificate, which only the host's apiserver can check); use a kubeconfig whose user has a " +
			"ServiceAccount or OIDC token, or the admin kubeconfig")
	}
	if u.Scheme == "http" && !isLoopback(u.Hostname()) {
		fmt.Fprintf(c.ErrOut, "Warning: the portal %s is plain HTTP: your token crosses the network unencrypted.\n", base)
	}
	rt, err := rest.HTTPWrappersForConfig(cfg, http.DefaultTransport)
	if err != nil {
		return nil, err
	}
	u.Path = strings.TrimSuffix(u.Path, "/") + fmt.Sprintf("/api/v1/namespaces/%s/virtualclusters/%s/personal-kubeconfig",
		url.PathEscape(vc.Namespace), url.PathEscape(vc.Name))
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := (&http.Client{Transport: rt, Timeout: time.Minute}).Do(req)
	if err != nil {
		return nil, fmt.Errorf("asking the portal for a personal kubeconfig: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("reading the portal's answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("the portal refused a personal kubeconfig for %s/%s (%s): %s", vc.Namespace, vc.Name, resp.Status, strings.TrimSpace(string(body)))
	}
	return body, nil
}

// portalURL checks --portal.
func portalURL(base string) (*url.URL, error) {
	if base == "" {
		return nil, fmt.Errorf("--personal takes the portal's address: --portal URL or $%s (kubectl -n kubenest-system get svc kubenest-portal)", portalEnv)
	}
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, fmt.Errorf("--portal %q is not an http(s) URL", base)
	}
	return u, nil
}

func (c *cli) kubeconfigCommand() *cobra.Command {
	var p credentials
	var file string
	cmd := &cobra.Command{
		Use:   "kubeconfig NAME",
		Short: "Print a virtual cluster's kubeconfig (admin, or --personal), or write it to --file",
		Long: `Print the kubeconfig of a virtual cluster: the admin one from its Secret (it takes get on
that Secret), or with --personal one for you alone, minted by KubeNest's portal. The
kubeconfig is checked first: one that would run a command, read a file or go anywhere but
the virtual cluster's endpoint is refused (the Secret is in a namespace others may write).`,
		Example: `  kubectl nest kubeconfig team-a -n tenants > team-a.kubeconfig
  kubectl nest kubeconfig team-a -n tenants --file team-a.kubeconfig
  kubectl nest kubeconfig team-a -n tenants --personal --portal https://portal.example.com`,
		Args: exactlyOneName,
		RunE: func(cmd *cobra.Command, args []string) error {
			vc, data, err := c.kubeconfigFor(cmd.Context(), args[0], p)
			if err != nil {
				return err
			}
			if file == "" {
				_, err := c.Out.Write(data)
				return err
			}
			if err := atomicfile.Write(file, data, 0o600); err != nil {
				return fmt.Errorf("writing %s: %w", file, err)
			}
			fmt.Fprintf(c.ErrOut, "Wrote the kubeconfig of %s/%s to %s.\n", vc.Namespace, vc.Name, file)
			return nil
		},
	}
	p.addFlags(cmd)
	cmd.Flags().StringVar(&file, "file", "", "Write the kubeconfig to this file (mode 0600) instead of printing it.")
	return cmd
}

func (c *cli) connectCommand() *cobra.Command {
	var p credentials
	var into, contextName string
	var noSwitch bool
	cmd := &cobra.Command{
		Use:   "connect NAME",
		Short: "Add a virtual cluster to your kubeconfig file as a context, and switch to it",
		Long: `Add a virtual cluster's kubeconfig (admin, or --personal) to a kubeconfig file as a context
named kubenest-<namespace>-<name> (--context-name), with a cluster and a user of the same name,
and make it the current context (unless --no-switch). Entries of that name are replaced; nothing
else in the file changes. The file is the first of $KUBECONFIG, else ~/.kube/config (--into);
the host's kubeconfig given with --kubeconfig is only read.`,
		Example: `  kubectl nest connect team-a -n tenants
  kubectl get ns                                  # now in team-a
  kubectl nest connect team-a -n tenants --into team-a.kubeconfig --no-switch`,
		Args: exactlyOneName,
		RunE: func(cmd *cobra.Command, args []string) error {
			vc, data, err := c.kubeconfigFor(cmd.Context(), args[0], p)
			if err != nil {
				return err
			}
			if contextName == "" {
				contextName = "kubenest-" + vc.Namespace + "-" + vc.Name
			}
			if into == "" {
				into = defaultKubeconfigFile()
			}
			if err := mergeContext(into, contextName, data, !noSwitch); err != nil {
				return err
			}
			if noSwitch {
				fmt.Fprintf(c.Out, "Context %q for %s/%s added to %s (kubectl config use-context %s).\n", contextName, vc.Namespace, vc.Name, into, contextName)
			} else {
				fmt.Fprintf(c.Out, "Context %q for %s/%s added to %s; it is the current context now.\n", contextName, vc.Namespace, vc.Name, into)
			}
			return nil
		},
	}
	p.addFlags(cmd)
	cmd.Flags().StringVar(&into, "into", "", "The kubeconfig file to add the context to (default: the first of $KUBECONFIG, else ~/.kube/config).")
	cmd.Flags().StringVar(&contextName, "context-name", "", "Name of the context, cluster and user entries (default kubenest-<namespace>-<name>).")
	cmd.Flags().BoolVar(&noSwitch, "no-switch", false, "Add the context without making it the current one.")
	return cmd
}

// defaultKubeconfigFile is where kubectl writes: the first file of $KUBECONFIG, else
// ~/.kube/config.
func defaultKubeconfigFile() string {
	if paths := filepath.SplitList(os.Getenv(clientcmd.RecommendedConfigPathEnvVar)); len(paths) > 0 && paths[0] != "" {
		return paths[0]
	}
	return clientcmd.RecommendedHomeFile
}

// mergeContext adds the single-context kubeconfig data to the file path under name (context,
// cluster and user), replacing entries of that name, and makes it current if current.
func mergeContext(path, name string, data []byte, current bool) error {
	add, err := clientcmd.Load(data)
	if err != nil {
		return err
	}
	ctx := add.Contexts[add.CurrentContext]
	if ctx == nil {
		return errors.New("the kubeconfig has no current context")
	}
	cfg, err := clientcmd.LoadFromFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		cfg = clientcmdapi.NewConfig()
	case err != nil:
		return fmt.Errorf("reading %s: %w", path, err)
	}
	cfg.Clusters[name] = add.Clusters[ctx.Cluster]
	cfg.AuthInfos[name] = add.AuthInfos[ctx.AuthInfo]
	cfg.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name}
	if current || cfg.CurrentContext == "" {
		cfg.CurrentContext = name
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	out, err := clientcmd.Write(*cfg)
	if err != nil {
		return err
	}
	if err := atomicfile.Write(path, out, 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// target is what a wait waits for.
type target string

const (
	targetReady  target = "Ready"
	targetAsleep target = "Asleep"
)

func (c *cli) waitCommand() *cobra.Command {
	var timeout time.Duration
	var forFlag string
	cmd := &cobra.Command{
		Use:   "wait NAME",
		Short: "Wait until a virtual cluster is Ready (or --for Asleep), saying what it waits for",
		Long: `Wait until a virtual cluster is Ready (condition Ready True, for its current spec), or with
--for Asleep until it sleeps. Each change of phase is printed on stderr with what the cluster
is waiting for. It fails at once when the cluster is Failed, and after --timeout with the
conditions that are not met.`,
		Example: "  kubectl nest wait team-a -n tenants --timeout 3m",
		Args:    exactlyOneName,
		RunE: func(cmd *cobra.Command, args []string) error {
			t := target(forFlag)
			if t != targetReady && t != targetAsleep {
				return fmt.Errorf("--for %q: it takes Ready or Asleep", forFlag)
			}
			return c.wait(cmd.Context(), args[0], t, 0, timeout)
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Minute, "How long to wait.")
	cmd.Flags().StringVar(&forFlag, "for", string(targetReady), "What to wait for: Ready or Asleep.")
	return cmd
}

// wait waits until the virtual cluster name reaches t, for a generation at least minGeneration.
func (c *cli) wait(ctx context.Context, name string, t target, minGeneration int64, timeout time.Duration) error {
	cl, err := c.client()
	if err != nil {
		return err
	}
	var vc *v1alpha1.VirtualCluster
	var last string
	var readErr error
	start := time.Now()
	err = wait.PollUntilContextTimeout(ctx, time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		got, err := c.getVC(ctx, cl, name)
		if errors.As(err, new(notFound)) {
			return false, err
		}
		if err != nil { // the host's API is busy or gone for a moment: try again
			readErr = err
			return false, nil
		}
		vc = got
		// A status the operator wrote before the change asked for would say what is no more.
		if vc.Status.ObservedGeneration < max(vc.Generation, minGeneration) {
			return false, nil
		}
		if say := progress(vc); say != last {
			fmt.Fprintf(c.ErrOut, "%s/%s: %s\n", vc.Namespace, vc.Name, say)
			last = say
		}
		if vc.Status.Phase == v1alpha1.PhaseFailed {
			return false, fmt.Errorf("%s/%s Failed: %s", vc.Namespace, vc.Name, notMet(vc))
		}
		return meta.IsStatusConditionTrue(vc.Status.Conditions, string(t)), nil
	})
	if wait.Interrupted(err) {
		if vc == nil {
			return fmt.Errorf("virtual cluster %s: could not read it within %s: %w", name, timeout, readErr)
		}
		return fmt.Errorf("%s/%s is not %s after %s: %s", vc.Namespace, vc.Name, t, timeout, notMet(vc))
	}
	if err != nil {
		return err
	}
	if t == targetReady {
		fmt.Fprintf(c.Out, "%s/%s is Ready at %s (%s).\n", vc.Namespace, vc.Name, vc.Status.Endpoint, time.Since(start).Round(100*time.Millisecond))
	} else {
		fmt.Fprintf(c.Out, "%s/%s is asleep (%s).\n", vc.Namespace, vc.Name, time.Since(start).Round(100*time.Millisecond))
	}
	return nil
}

// progress is a virtual cluster's phase and what its Ready condition says.
func progress(vc *v1alpha1.VirtualCluster) string {
	say := or(string(vc.Status.Phase), "Pending")
	if cond := meta.FindStatusCondition(vc.Status.Conditions, v1alpha1.ConditionReady); cond != nil && cond.Message != "" {
		say += ": " + cond.Message
	}
	return say
}

// notMet lists the conditions that are not True, with their messages.
func notMet(vc *v1alpha1.VirtualCluster) string {
	var out []string
	for _, cond := range vc.Status.Conditions {
		if cond.Status != "True" && cond.Type != v1alpha1.ConditionAsleep {
			out = append(out, fmt.Sprintf("%s: %s", cond.Type, cond.Message))
		}
	}
	if len(out) == 0 {
		return "phase " + or(string(vc.Status.Phase), "Pending")
	}
	return strings.Join(out, "; ")
}

func (c *cli) sleepCommand(asleep bool) *cobra.Command {
	var timeout time.Duration
	var noWait bool
	use, short, t := "sleep NAME", "Put a virtual cluster to sleep: no process of it runs in the host; its data stays", targetAsleep
	long := `Put a virtual cluster to sleep (spec.sleep.asleep: true) and wait until it is asleep: its
etcd, control plane and shared-node pods stop, and its data stays on its volumes. Its endpoint
still accepts connections: the first request of a person wakes it (or kubectl nest wake).`
	if !asleep {
		use, short, t = "wake NAME", "Wake a sleeping virtual cluster and wait until it is Ready", targetReady
		long = `Wake a sleeping virtual cluster (spec.sleep.asleep: false) and wait until it is Ready again,
with its workloads as they were. A request to its endpoint wakes it too.`
	}
	cmd := &cobra.Command{
		Use: use, Short: short, Long: long, Args: exactlyOneName,
		Example: "  kubectl nest " + strings.Fields(use)[0] + " team-a -n tenants",
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			vc, err := c.getVC(cmd.Context(), cl, args[0])
			if err != nil {
				return err
			}
			patch := fmt.Appendf(nil, `{"spec":{"sleep":{"asleep":%t}}}`, asleep)
			if err := cl.Patch(cmd.Context(), vc, client.RawPatch(types.MergePatchType, patch)); err != nil {
				return fmt.Errorf("setting spec.sleep.asleep of %s/%s: %w", vc.Namespace, vc.Name, err)
			}
			if noWait {
				fmt.Fprintf(c.Out, "%s/%s: spec.sleep.asleep is %t.\n", vc.Namespace, vc.Name, asleep)
				return nil
			}
			return c.wait(cmd.Context(), vc.Name, t, vc.Generation, timeout)
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Minute, "How long to wait.")
	cmd.Flags().BoolVar(&noWait, "no-wait", false, "Set spec.sleep.asleep and return without waiting.")
	return cmd
}

func or(s, otherwise string) string {
	if s == "" {
		return otherwise
	}
	return s
}

func isLoopback(host string) bool {
	return host == "localhost" || host == "127.0.0.1" || host == "::1"
}
