// Command conformance runs the Kubernetes conformance suite (e2e.test, built from the
// k8s.io/kubernetes version go.mod pins) against a KubeNest tenant on the local host cluster;
// `make conformance` builds what it needs and runs it.
//
// It creates the tenant a conformance run needs, as the README would: a host namespace of its
// own, a VirtualCluster with the shared node and one lent node (--lent-nodes), granted
// privileged pods on its lent nodes (spec.nodes.podSecurity: Privileged, see the README's
// "Security model"); waits until it is Ready with its nodes; writes its kubeconfig to
// <out>/tenant.kubeconfig; runs the [Conformance] specs with ginkgo, those that are neither
// [Serial] nor [Disruptive] in parallel, then the others in one process; and writes the JUnit
// and JSON reports and a summary (<out>/summary.txt). At the end it deletes the tenant and its namespace, and returns the lent
// node to the host (a node lent to a privileged tenant comes back quarantined: on this local
// cluster the run marks it clean, as the README shows), unless --keep.
//
//	go run ./test/conformance --e2e-test e2e.test --ginkgo ginkgo --kubectl kubectl \
//	    --focus '\[sig-api-machinery\].*\[Conformance\]' --serial=false
//	go run ./test/conformance --cleanup   (removes a tenant an earlier --keep run left)
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/pkg/sharednode"
)

// labelConformance marks the host namespace a run creates, so a later run (or --cleanup) knows
// it may reuse or delete it.
const labelConformance = "kubenest.io/conformance"

type options struct {
	kubeconfig, namespace, name, out         string
	e2eTest, ginkgo, kubectl                 string
	focus, skip                              string
	procs, lentNodes, flakeAttempts          int
	serial, keep, cleanupOnly, sharedNode    bool
	readyTimeout, suiteTimeout, lendWait     time.Duration
	extraE2EArgs, sharedPlacement            string
	hostClient                               client.Client
	tenantKubeconfig, parallelDir, serialDir string
}

func main() {
	var o options
	flag.StringVar(&o.kubeconfig, "kubeconfig", "_output/host.kubeconfig", "kubeconfig of the host cluster")
	flag.StringVar(&o.namespace, "namespace", "conformance", "host namespace of the tenant (created, and deleted at the end)")
	flag.StringVar(&o.name, "name", "conformance", "name of the VirtualCluster")
	flag.StringVar(&o.out, "out", "_output/conformance", "directory of the kubeconfig, reports, logs and summary")
	flag.StringVar(&o.e2eTest, "e2e-test", "", "the suite's binary: go test -c k8s.io/kubernetes/test/e2e")
	flag.StringVar(&o.ginkgo, "ginkgo", "", "the ginkgo CLI of the ginkgo version e2e.test is built with")
	flag.StringVar(&o.kubectl, "kubectl", "", "kubectl, which the kubectl specs run")
	flag.StringVar(&o.focus, "focus", `\[Conformance\]`, "regular expression of the specs to run (ginkgo --focus)")
	flag.StringVar(&o.skip, "skip", "", "regular expression of specs not to run (ginkgo --skip); empty for none")
	flag.IntVar(&o.procs, "procs", 4, "parallel processes of the non-serial part")
	flag.IntVar(&o.flakeAttempts, "flake-attempts", 1, "runs of a failing spec before it counts as failed (ginkgo --flake-attempts); a spec that passes on a later run is listed as flaky with its first failure. 1 for a conformance figure")
	flag.IntVar(&o.lentNodes, "lent-nodes", 1, "host nodes lent to the tenant (0: the shared node only, without privileged pods; for a host with no free lendable node)")
	flag.BoolVar(&o.sharedNode, "shared-node", true, "give the tenant the shared node (false: lent nodes only, --lent-nodes of them)")
	flag.StringVar(&o.sharedPlacement, "shared-placement", "", "the tenant's spec.nodes.sharedPlacement: Overflow or OptIn; empty: OptIn with two lent nodes or more (the shared node tainted, as the suite expects of a node that does not run every pod), Overflow with fewer (the suite wants two untainted nodes)")
	flag.BoolVar(&o.serial, "serial", true, "run the [Serial] and [Disruptive] specs too, after the others, in one process")
	flag.BoolVar(&o.keep, "keep", false, "keep the tenant and its namespace at the end (reused by the next run; --cleanup removes them)")
	flag.BoolVar(&o.cleanupOnly, "cleanup", false, "only delete the tenant and namespace a --keep run left, and return its lent node")
	flag.DurationVar(&o.readyTimeout, "ready-timeout", 10*time.Minute, "how long the tenant may take to be Ready with its nodes")
	flag.DurationVar(&o.suiteTimeout, "suite-timeout", 4*time.Hour, "ginkgo --timeout of each part")
	flag.DurationVar(&o.lendWait, "return-timeout", 10*time.Minute, "how long the lent node may take to return to the host")
	flag.StringVar(&o.extraE2EArgs, "e2e-args", "", "more e2e.test flags, space-separated")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "conformance runs the Kubernetes conformance suite against a KubeNest tenant of the local host cluster.\n\nFlags:\n")
		flag.PrintDefaults()
	}
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	code, err := run(ctx, &o)
	if err != nil {
		fmt.Fprintf(os.Stderr, "conformance: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

func logf(format string, args ...any) {
	fmt.Printf("conformance: %s %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

// run returns the exit code: 0 when every spec that ran passed, 1 when some failed.
func run(ctx context.Context, o *options) (int, error) {
	scheme := kruntime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return 1, err
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return 1, err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	if err != nil {
		return 1, fmt.Errorf("host kubeconfig %s: %w (is the local cluster up? 'make up')", o.kubeconfig, err)
	}
	o.hostClient, err = client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return 1, err
	}
	if o.cleanupOnly {
		return 0, cleanup(o)
	}
	for flagName, f := range map[string]string{"--e2e-test": o.e2eTest, "--ginkgo": o.ginkgo, "--kubectl": o.kubectl} {
		if f == "" {
			return 1, fmt.Errorf("%s is required ('make conformance' passes it)", flagName)
		}
		if _, err := os.Stat(f); err != nil {
			return 1, fmt.Errorf("%s: %w ('make conformance-bin' builds it)", flagName, err)
		}
	}
	if !o.sharedNode && o.lentNodes < 1 {
		return 1, errors.New("--shared-node=false needs --lent-nodes 1 or more: a tenant without nodes runs no spec")
	}
	switch v1alpha1.SharedPlacement(o.sharedPlacement) {
	case "":
		o.sharedPlacement = string(v1alpha1.SharedPlacementOverflow)
		if o.lentNodes >= 2 {
			o.sharedPlacement = string(v1alpha1.SharedPlacementOptIn)
		}
	case v1alpha1.SharedPlacementOverflow, v1alpha1.SharedPlacementOptIn:
	default:
		return 1, fmt.Errorf("--shared-placement %q: want Overflow or OptIn", o.sharedPlacement)
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return 1, err
	}
	o.tenantKubeconfig = filepath.Join(o.out, "tenant.kubeconfig")
	o.parallelDir, o.serialDir = filepath.Join(o.out, "parallel"), filepath.Join(o.out, "serial")
	for _, d := range []string{o.parallelDir, o.serialDir} {
		// Reports of an earlier run must not count in this one's summary.
		if err := os.RemoveAll(d); err != nil {
			return 1, err
		}
	}

	started := time.Now()
	if !o.keep {
		defer func() {
			if err := cleanup(o); err != nil {
				fmt.Fprintf(os.Stderr, "conformance: cleaning up: %v\n", err)
			}
		}()
	}
	if err := createTenant(ctx, o); err != nil {
		return 1, err
	}
	if o.keep {
		logf("--keep: the tenant stays; 'make conformance-clean' deletes it and returns its node")
	}

	var parts []part
	p, err := runPart(ctx, o, "parallel", o.parallelDir, o.procs, "!Serial && !Disruptive")
	if err != nil {
		return 1, err
	}
	parts = append(parts, p)
	if o.serial && ctx.Err() == nil {
		p, err := runPart(ctx, o, "serial", o.serialDir, 1, "Serial || Disruptive")
		if err != nil {
			return 1, err
		}
		parts = append(parts, p)
	}
	sum, failed := summarize(o, parts, time.Since(started))
	fmt.Print("\n" + sum)
	if err := os.WriteFile(filepath.Join(o.out, "summary.txt"), []byte(sum), 0o644); err != nil {
		return 1, err
	}
	logf("summary in %s, JUnit in %s/*/junit.xml", filepath.Join(o.out, "summary.txt"), o.out)
	if ctx.Err() != nil {
		return 1, fmt.Errorf("interrupted")
	}
	if failed > 0 {
		return 1, nil
	}
	return 0, nil
}

// conformanceVC is the tenant of a conformance run: its apiserver on a NodePort (lent nodes
// need a tenant reachable from outside the host's pod network), the shared node, the lent
// nodes, and privileged pods on them, which the platform grants (the suite's specs run
// privileged, hostNetwork and hostPath pods, which only a lent node may run).
func conformanceVC(o *options) *v1alpha1.VirtualCluster {
	vc := &v1alpha1.VirtualCluster{
		ObjectMeta: metav1.ObjectMeta{Name: o.name, Namespace: o.namespace},
		Spec: v1alpha1.VirtualClusterSpec{
			ControlPlane: v1alpha1.ControlPlaneSpec{Exposure: v1alpha1.ExposureSpec{Type: v1alpha1.ExposureNodePort}},
			Nodes:        v1alpha1.NodesSpec{Shared: o.sharedNode},
		},
	}
	if o.sharedNode {
		vc.Spec.Nodes.SharedPlacement = v1alpha1.SharedPlacement(o.sharedPlacement)
	}
	if o.lentNodes > 0 {
		vc.Spec.Nodes.Promotions = []v1alpha1.NodePromotion{{Name: "workers", Count: int32(o.lentNodes)}}
		vc.Spec.Nodes.PodSecurity = v1alpha1.NodePodSecurityPrivileged
	}
	return vc
}

// describe says what the tenant is, for the log and the summary.
func (o *options) describe() string {
	switch {
	case o.lentNodes == 0:
		return fmt.Sprintf("shared node only (placement %s), no lent node", o.sharedPlacement)
	case !o.sharedNode:
		return fmt.Sprintf("%d lent node(s), no shared node, privileged pods granted on them", o.lentNodes)
	}
	return fmt.Sprintf("shared node (placement %s) + %d lent node(s), privileged pods granted on lent nodes", o.sharedPlacement, o.lentNodes)
}

// createTenant creates (or, when a --keep run left it, reuses) the tenant, waits until it is
// Ready with its two nodes, and writes its kubeconfig.
func createTenant(ctx context.Context, o *options) error {
	c := o.hostClient
	ns := &corev1.Namespace{}
	err := c.Get(ctx, client.ObjectKey{Name: o.namespace}, ns)
	switch {
	case apierrors.IsNotFound(err):
		ns = &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: o.namespace, Labels: map[string]string{labelConformance: "true"}}}
		if err := c.Create(ctx, ns); err != nil {
			return fmt.Errorf("creating namespace %s: %w", o.namespace, err)
		}
	case err != nil:
		return fmt.Errorf("reading namespace %s: %w", o.namespace, err)
	case ns.Labels[labelConformance] != "true":
		return fmt.Errorf("namespace %s exists and is not a conformance run's (no %s=true label): pick another with --namespace", o.namespace, labelConformance)
	case ns.DeletionTimestamp != nil:
		return fmt.Errorf("namespace %s is being deleted (an earlier run's cleanup): wait until it is gone", o.namespace)
	default:
		logf("namespace %s exists (an earlier run kept it): reusing it", o.namespace)
	}
	vc := conformanceVC(o)
	if err := c.Create(ctx, vc); apierrors.IsAlreadyExists(err) {
		logf("VirtualCluster %s/%s exists: reusing it", o.namespace, o.name)
	} else if err != nil {
		return fmt.Errorf("creating VirtualCluster %s/%s: %w", o.namespace, o.name, err)
	} else {
		logf("created VirtualCluster %s/%s: %s", o.namespace, o.name, o.describe())
	}
	if o.lentNodes > 0 {
		logf("the platform grants this tenant privileged pods on its lent nodes (spec.nodes.podSecurity: Privileged; README, \"Security model\"): " +
			"the suite runs privileged, hostNetwork and hostPath pods, which only a lent node may run")
	} else {
		logf("no lent node (--lent-nodes=0): specs that need host access (privileged, hostNetwork, hostPath, host ports) cannot run; their pods stay Pending")
	}

	logf("waiting up to %s for the tenant to be Ready with its nodes", o.readyTimeout)
	var last string
	err = wait.PollUntilContextTimeout(ctx, 2*time.Second, o.readyTimeout, true, func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(vc), vc); err != nil {
			return false, nil
		}
		state := fmt.Sprintf("phase %s", vc.Status.Phase)
		for _, t := range []string{v1alpha1.ConditionReady, v1alpha1.ConditionSharedNodeReady, v1alpha1.ConditionNodesReady} {
			if cond := meta.FindStatusCondition(vc.Status.Conditions, t); cond != nil {
				state += fmt.Sprintf(", %s=%s", t, cond.Status)
				if cond.Status != metav1.ConditionTrue && cond.Message != "" {
					state += fmt.Sprintf(" (%s)", cond.Message)
				}
			}
		}
		if state != last {
			logf("  %s", state)
			last = state
		}
		return meta.IsStatusConditionTrue(vc.Status.Conditions, v1alpha1.ConditionReady) &&
			(!o.sharedNode || meta.IsStatusConditionTrue(vc.Status.Conditions, v1alpha1.ConditionSharedNodeReady)) &&
			(o.lentNodes == 0 || meta.IsStatusConditionTrue(vc.Status.Conditions, v1alpha1.ConditionNodesReady)), nil
	})
	if err != nil {
		return fmt.Errorf("VirtualCluster %s/%s not Ready with its nodes within %s; last seen: %s (kubectl -n %s describe vc %s; kubectl get poolnodes)",
			o.namespace, o.name, o.readyTimeout, last, o.namespace, o.name)
	}
	ref := vc.Status.KubeconfigSecretRef
	if ref == nil {
		return fmt.Errorf("VirtualCluster %s/%s is Ready but has no status.kubeconfigSecretRef", o.namespace, o.name)
	}
	s := &corev1.Secret{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: o.namespace, Name: ref.Name}, s); err != nil {
		return fmt.Errorf("reading the tenant's kubeconfig Secret %s: %w", ref.Name, err)
	}
	if err := os.WriteFile(o.tenantKubeconfig, s.Data[ref.Key], 0o600); err != nil {
		return err
	}
	logf("tenant kubeconfig: %s (endpoint %s)", o.tenantKubeconfig, vc.Status.Endpoint)

	tcfg, err := clientcmd.RESTConfigFromKubeConfig(s.Data[ref.Key])
	if err != nil {
		return fmt.Errorf("the tenant's kubeconfig: %w", err)
	}
	tenant, err := kubernetes.NewForConfig(tcfg)
	if err != nil {
		return err
	}
	want := o.lentNodes
	if o.sharedNode {
		want++
	}
	var nodes []string
	err = wait.PollUntilContextTimeout(ctx, 2*time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := tenant.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		nodes = nodes[:0]
		for _, n := range l.Items {
			for _, cond := range n.Status.Conditions {
				if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue && !n.Spec.Unschedulable {
					nodes = append(nodes, n.Name)
				}
			}
		}
		return len(nodes) >= want, nil
	})
	if err != nil {
		return fmt.Errorf("the tenant has %d schedulable Ready node(s) (%s), want %d (%s)", len(nodes), strings.Join(nodes, ", "), want, o.describe())
	}
	logf("tenant nodes Ready: %s", strings.Join(nodes, ", "))
	return nil
}

// part is one ginkgo run of the suite and where its reports are.
type part struct {
	name     string
	dir      string
	exitCode int
	duration time.Duration
}

// runPart runs ginkgo over e2e.test with the focus and skip, and the label filter of the part.
func runPart(ctx context.Context, o *options, name, dir string, procs int, labels string) (part, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return part{}, err
	}
	absDir, err := filepath.Abs(dir)
	if err != nil {
		return part{}, err
	}
	args := []string{"--no-color", "--silence-skips", "--timeout=" + o.suiteTimeout.String(), "--output-dir=" + absDir,
		"--json-report=report.json", "--junit-report=junit.xml", "--focus=" + o.focus, "--label-filter=" + labels}
	if o.skip != "" {
		args = append(args, "--skip="+o.skip)
	}
	if procs > 1 {
		args = append(args, fmt.Sprintf("--procs=%d", procs))
	}
	if o.flakeAttempts > 1 {
		args = append(args, fmt.Sprintf("--flake-attempts=%d", o.flakeAttempts))
	}
	kubeconfig, err := filepath.Abs(o.tenantKubeconfig)
	if err != nil {
		return part{}, err
	}
	args = append(args, o.e2eTest, "--", "--kubeconfig="+kubeconfig, "--kubectl-path="+o.kubectl,
		"--report-dir="+absDir, "--provider=skeleton",
		// A tainted node is not waited for at the start (upstream's default names the
		// control-plane taint only): the shared node of an OptIn tenant keeps its taint.
		"--non-blocking-taints=node-role.kubernetes.io/control-plane,"+sharednode.Taint.Key)
	args = append(args, strings.Fields(o.extraE2EArgs)...)

	logPath := filepath.Join(dir, "ginkgo.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return part{}, err
	}
	defer logFile.Close()
	logf("%s part: ginkgo %s (log %s)", name, strings.Join(args, " "), logPath)
	cmd := exec.CommandContext(ctx, o.ginkgo, args...)
	cmd.Stdout = io.MultiWriter(os.Stdout, logFile)
	cmd.Stderr = io.MultiWriter(os.Stderr, logFile)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	// Ctrl-C reaches ginkgo, which stops its specs and writes its reports; not a kill.
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 2 * time.Minute
	start := time.Now()
	err = cmd.Run()
	p := part{name: name, dir: dir, duration: time.Since(start)}
	var exitErr *exec.ExitError
	switch {
	case errors.As(err, &exitErr):
		p.exitCode = exitErr.ExitCode()
		logf("%s part: ginkgo exited %d after %s", name, p.exitCode, p.duration.Round(time.Second))
	case err != nil:
		return p, fmt.Errorf("running ginkgo: %w", err)
	default:
		logf("%s part: ginkgo succeeded after %s", name, p.duration.Round(time.Second))
	}
	return p, nil
}

// specReport is what the summary reads of ginkgo's JSON report (types.SpecReport).
type specReport struct {
	ContainerHierarchyTexts []string
	LeafNodeType            string
	LeafNodeText            string
	State                   string
	RunTime                 time.Duration
	NumAttempts             int
	Failure                 *specFailure
	// The failures of the runs before the last, with --flake-attempts.
	AdditionalFailures []struct{ Failure specFailure }
}

type specFailure struct {
	Message  string
	Location struct {
		FileName   string
		LineNumber int
	}
}

// summarize counts the specs of every part by state and lists those that did not pass; it
// returns the text and the number of failures.
func summarize(o *options, parts []part, total time.Duration) (string, int) {
	var b strings.Builder
	fmt.Fprintf(&b, "Kubernetes conformance against KubeNest tenant %s/%s (%s)\n", o.namespace, o.name, o.describe())
	fmt.Fprintf(&b, "focus: %s\nskip: %s\n", o.focus, o.skip)
	failedTotal := 0
	for _, p := range parts {
		data, err := os.ReadFile(filepath.Join(p.dir, "report.json"))
		var reports []struct{ SpecReports []specReport }
		if err == nil {
			err = json.Unmarshal(data, &reports)
		}
		if err != nil {
			fmt.Fprintf(&b, "\n%s part: no report (%v); ginkgo exited %d after %s\n", p.name, err, p.exitCode, p.duration.Round(time.Second))
			failedTotal++
			continue
		}
		counts := map[string]int{}
		var failed, flaky, skipped []string
		for _, r := range reports {
			for _, s := range r.SpecReports {
				if s.LeafNodeType != "It" {
					// A suite node that failed fails the run: list it, do not count it as a spec.
					if s.State != "passed" && s.State != "skipped" {
						failed = append(failed, fmt.Sprintf("  [%s %s] %s", s.LeafNodeType, s.State, failureLine(s.Failure)))
					}
					continue
				}
				if s.State == "skipped" && s.Failure == nil {
					continue // not selected by the focus, skip and label filter
				}
				counts[s.State]++
				name := strings.TrimSpace(strings.Join(append(slices.Clone(s.ContainerHierarchyTexts), s.LeafNodeText), " "))
				switch s.State {
				case "passed":
					if s.NumAttempts > 1 && len(s.AdditionalFailures) > 0 {
						flaky = append(flaky, fmt.Sprintf("  [flaky: passed on run %d of %d] %s\n      first run: %s", s.NumAttempts, o.flakeAttempts, name, failureLine(&s.AdditionalFailures[0].Failure)))
					}
				case "pending":
				case "skipped": // by the spec itself, at run time: it says why
					skipped = append(skipped, fmt.Sprintf("  [skipped] %s\n      %s", name, failureLine(s.Failure)))
				default:
					failed = append(failed, fmt.Sprintf("  [%s after %s] %s\n      %s", s.State, s.RunTime.Round(time.Second), name, failureLine(s.Failure)))
				}
			}
		}
		ran := counts["passed"] + len(failed)
		fmt.Fprintf(&b, "\n%s part (%s): %d of %d passed, %d failed, %d skipped by the spec itself; ginkgo exit %d\n",
			p.name, p.duration.Round(time.Second), counts["passed"], ran, len(failed), len(skipped), p.exitCode)
		if len(flaky) > 0 {
			fmt.Fprintf(&b, "%d of the passed failed a run first (--flake-attempts %d)\n", len(flaky), o.flakeAttempts)
		}
		slices.Sort(failed)
		slices.Sort(flaky)
		slices.Sort(skipped)
		for _, f := range slices.Concat(failed, flaky, skipped) {
			fmt.Fprintln(&b, f)
		}
		failedTotal += len(failed)
	}
	fmt.Fprintf(&b, "\ntotal duration (tenant creation included): %s\n", total.Round(time.Second))
	return b.String(), failedTotal
}

// failureLine is the first line of a spec's failure message and where it failed.
func failureLine(f *specFailure) string {
	if f == nil {
		return ""
	}
	msg, _, _ := strings.Cut(strings.TrimSpace(f.Message), "\n")
	if len(msg) > 300 {
		msg = msg[:300] + "..."
	}
	return fmt.Sprintf("%s (%s:%d)", msg, filepath.Base(f.Location.FileName), f.Location.LineNumber)
}

// cleanup deletes the tenant, which returns its lent node; a node a privileged tenant had comes
// back quarantined, and on this local cluster (where reimaging means nothing) the run marks it
// clean, as the README shows, and waits until it serves the host again. Then it deletes the
// namespace. It uses a context of its own: it runs after an interrupt too.
func cleanup(o *options) error {
	ctx, cancel := context.WithTimeout(context.Background(), o.lendWait+5*time.Minute)
	defer cancel()
	c := o.hostClient
	ns := &corev1.Namespace{}
	if err := c.Get(ctx, client.ObjectKey{Name: o.namespace}, ns); apierrors.IsNotFound(err) {
		logf("cleanup: namespace %s is gone already", o.namespace)
		return nil
	} else if err != nil {
		return err
	}
	if ns.Labels[labelConformance] != "true" {
		return fmt.Errorf("namespace %s is not a conformance run's (no %s=true label): not deleting it", o.namespace, labelConformance)
	}
	logf("cleanup: deleting VirtualCluster %s/%s (lent nodes return to the host)", o.namespace, o.name)
	vc := &v1alpha1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Namespace: o.namespace, Name: o.name}}
	if err := c.Delete(ctx, vc); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting VirtualCluster: %w", err)
	}
	err := wait.PollUntilContextTimeout(ctx, 2*time.Second, o.lendWait, true, func(ctx context.Context) (bool, error) {
		err := c.Get(ctx, client.ObjectKeyFromObject(vc), vc)
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		return fmt.Errorf("VirtualCluster %s/%s still there after %s (kubectl -n %s describe vc %s)", o.namespace, o.name, o.lendWait, o.namespace, o.name)
	}
	if err := returnNodes(ctx, o); err != nil {
		return err
	}
	logf("cleanup: deleting namespace %s", o.namespace)
	if err := c.Delete(ctx, ns); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting namespace %s: %w", o.namespace, err)
	}
	err = wait.PollUntilContextTimeout(ctx, 2*time.Second, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		err := c.Get(ctx, client.ObjectKey{Name: o.namespace}, &corev1.Namespace{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		return fmt.Errorf("namespace %s still there after 5m (kubectl get ns %s -o yaml)", o.namespace, o.namespace)
	}
	logf("cleanup: done")
	return nil
}

// returnNodes waits until no PoolNode is with the tenant any more, marks clean those it left
// quarantined, and waits until they serve the host.
func returnNodes(ctx context.Context, o *options) error {
	c := o.hostClient
	ours := func(pn *v1alpha1.PoolNode) bool {
		return pn.Status.Quarantine != nil && pn.Status.Quarantine.Tenant.Namespace == o.namespace && pn.Status.Quarantine.Tenant.Name == o.name
	}
	marked := map[string]bool{}
	var pending []string
	err := wait.PollUntilContextTimeout(ctx, 2*time.Second, o.lendWait, true, func(ctx context.Context) (bool, error) {
		l := &v1alpha1.PoolNodeList{}
		if err := c.List(ctx, l); err != nil {
			return false, nil
		}
		pending = pending[:0]
		for i := range l.Items {
			pn := &l.Items[i]
			inTenant := pn.Spec.Tenant != nil && pn.Spec.Tenant.Namespace == o.namespace && pn.Spec.Tenant.Name == o.name
			switch {
			case pn.Status.Phase == v1alpha1.PoolNodeQuarantined && ours(pn) && !marked[pn.Name]:
				logf("cleanup: PoolNode %s is quarantined (it was lent to a tenant granted privileged pods); "+
					"this local cluster's node is not reimaged: marking it clean (%s), as the README shows", pn.Name, v1alpha1.AnnotationMarkClean)
				patch := client.MergeFrom(pn.DeepCopy())
				if pn.Annotations == nil {
					pn.Annotations = map[string]string{}
				}
				pn.Annotations[v1alpha1.AnnotationMarkClean] = fmt.Sprint(time.Now().Unix())
				if err := c.Patch(ctx, pn, patch); err != nil {
					return false, fmt.Errorf("marking PoolNode %s clean: %w", pn.Name, err)
				}
				marked[pn.Name] = true
				pending = append(pending, pn.Name+" (marked clean)")
			case inTenant || ours(pn) || (marked[pn.Name] && pn.Status.Phase != v1alpha1.PoolNodeInHost):
				pending = append(pending, fmt.Sprintf("%s (%s)", pn.Name, pn.Status.Phase))
			}
		}
		return len(pending) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("lent node(s) not back in the host after %s: %s (kubectl get poolnodes): %w", o.lendWait, strings.Join(pending, ", "), err)
	}
	for n := range marked {
		logf("cleanup: PoolNode %s is back in the host", n)
	}
	return nil
}
