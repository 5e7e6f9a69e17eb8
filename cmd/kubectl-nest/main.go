// Command kubectl-nest is the kubectl plugin for KubeNest's virtual clusters: "kubectl nest".
// It acts on the host cluster as the user of the kubeconfig it is given, so the host's RBAC
// decides what each person may list, download, wait for, put to sleep and wake.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/pkg/version"
)

func main() {
	if err := newRoot(genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr}).Execute(); err != nil {
		fmt.Fprintf(os.Stderr, "error: %v\n", err)
		os.Exit(1)
	}
}

var scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := corev1.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := v1alpha1.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}()

// cli is what every command shares: the host cluster's connection flags and the streams.
type cli struct {
	flags *genericclioptions.ConfigFlags
	genericiooptions.IOStreams
}

func newRoot(streams genericiooptions.IOStreams) *cobra.Command {
	c := &cli{flags: genericclioptions.NewConfigFlags(true), IOStreams: streams}
	root := &cobra.Command{
		Use:   "nest",
		Short: "Use KubeNest's virtual clusters from kubectl",
		Long: `kubectl nest lists the virtual clusters (VirtualClusters, group kubenest.io) of the host
cluster, hands out their kubeconfigs, waits for them, and puts them to sleep and wakes them.

It talks to the host cluster with your kubeconfig (--kubeconfig, --context, -n as for kubectl),
as you: the host's RBAC decides what you may see and do. The admin kubeconfig is read from the
virtual cluster's Secret, so it takes get on that Secret; a personal kubeconfig (--personal) is
minted by KubeNest's portal, which checks that you may create virtualclusters/kubeconfig.`,
		Version:       version.String(),
		SilenceUsage:  true,
		SilenceErrors: true,
		// kubectl runs kubectl-nest for "kubectl nest": help and errors say so.
		Annotations:       map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl nest"},
		CompletionOptions: cobra.CompletionOptions{DisableDefaultCmd: true},
	}
	root.SetOut(streams.Out)
	root.SetErr(streams.ErrOut)
	c.flags.AddFlags(root.PersistentFlags())
	root.AddCommand(c.listCommand(), c.kubeconfigCommand(), c.connectCommand(), c.waitCommand(),
		c.sleepCommand(true), c.sleepCommand(false))
	return root
}

// client is a host client as the kubeconfig's user.
func (c *cli) client() (client.Client, error) {
	cfg, err := c.flags.ToRESTConfig()
	if err != nil {
		return nil, fmt.Errorf("reading the host cluster's kubeconfig: %w", err)
	}
	return client.New(cfg, client.Options{Scheme: scheme})
}

// namespace is -n, or the kubeconfig context's namespace, or "default".
func (c *cli) namespace() (string, error) {
	ns, _, err := c.flags.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return "", fmt.Errorf("reading the namespace from the kubeconfig: %w", err)
	}
	return ns, nil
}

// exactlyOneName is cobra's argument check with a message that says what is missing.
func exactlyOneName(cmd *cobra.Command, args []string) error {
	if len(args) != 1 {
		return errors.New(cmd.CommandPath() + " takes the name of one virtual cluster: " + cmd.Use)
	}
	return nil
}
