package clustertree

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/virtual-kubelet/virtual-kubelet/node/api"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/transport/spdy"
)

// RunInContainer runs a command in the host pod's container, wired to the tenant's streams:
// `kubectl exec` in the tenant.
func (p *provider) RunInContainer(ctx context.Context, namespace, podName, container string, cmd []string, attach api.AttachIO) error {
	return p.stream(ctx, namespace, podName, "exec", &corev1.PodExecOptions{
		Container: container, Command: cmd,
		Stdin: attach.Stdin() != nil, Stdout: attach.Stdout() != nil, Stderr: attach.Stderr() != nil, TTY: attach.TTY(),
	}, attach)
}

// AttachToContainer attaches to the host pod's container: `kubectl attach` in the tenant.
func (p *provider) AttachToContainer(ctx context.Context, namespace, podName, container string, attach api.AttachIO) error {
	return p.stream(ctx, namespace, podName, "attach", &corev1.PodAttachOptions{
		Container: container,
		Stdin:     attach.Stdin() != nil, Stdout: attach.Stdout() != nil, Stderr: attach.Stderr() != nil, TTY: attach.TTY(),
	}, attach)
}

// stream runs an exec or attach request against the host pod with the tenant's streams.
func (p *provider) stream(ctx context.Context, namespace, podName, subresource string, opts runtime.Object, attach api.AttachIO) error {
	u := p.host.CoreV1().RESTClient().Post().Resource("pods").Namespace(p.tr.HostNamespace).
		Name(HostName(p.tr.VirtualCluster, namespace, podName)).SubResource(subresource).
		VersionedParams(opts, scheme.ParameterCodec).URL()
	exec, err := p.executor(u)
	if err != nil {
		return err
	}
	so := remotecommand.StreamOptions{Tty: attach.TTY()}
	if in := attach.Stdin(); in != nil {
		so.Stdin = in
	}
	if out := attach.Stdout(); out != nil {
		so.Stdout = out
	}
	if errOut := attach.Stderr(); errOut != nil {
		so.Stderr = errOut
	}
	if attach.TTY() {
		so.TerminalSizeQueue = sizeQueue(attach.Resize())
	}
	return exec.StreamWithContext(ctx, so)
}

// PortForward forwards one tenant port-forward connection to the host pod's port:
// `kubectl port-forward` in the tenant. It speaks the port-forward protocol to the host's
// apiserver as client-go's port forwarder does, for a single stream.
func (p *provider) PortForward(ctx context.Context, namespace, podName string, port int32, stream io.ReadWriteCloser) error {
	defer stream.Close()
	u := p.host.CoreV1().RESTClient().Post().Resource("pods").Namespace(p.tr.HostNamespace).
		Name(HostName(p.tr.VirtualCluster, namespace, podName)).SubResource("portforward").URL()
	transport, upgrader, err := spdy.RoundTripperFor(p.hostREST)
	if err != nil {
		return err
	}
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: transport}, http.MethodPost, u)
	conn, _, err := dialer.Dial(portforward.PortForwardProtocolV1Name)
	if err != nil {
		return fmt.Errorf("port-forward to host pod: %w", err)
	}
	defer conn.Close()

	headers := http.Header{}
	headers.Set(corev1.StreamType, corev1.StreamTypeError)
	headers.Set(corev1.PortHeader, strconv.Itoa(int(port)))
	headers.Set(corev1.PortForwardRequestIDHeader, "0")
	errStream, err := conn.CreateStream(headers)
	if err != nil {
		return fmt.Errorf("port-forward error stream: %w", err)
	}
	_ = errStream.Close() // nothing is sent on it
	remoteErr := make(chan error, 1)
	go func() {
		msg, err := io.ReadAll(errStream)
		switch {
		case err != nil:
			remoteErr <- fmt.Errorf("reading the port-forward error stream: %w", err)
		case len(msg) > 0:
			remoteErr <- fmt.Errorf("port-forward to host pod: %s", msg)
		default:
			remoteErr <- nil
		}
	}()

	headers.Set(corev1.StreamType, corev1.StreamTypeData)
	data, err := conn.CreateStream(headers)
	if err != nil {
		return fmt.Errorf("port-forward data stream: %w", err)
	}
	sent := make(chan error, 1)
	go func() {
		_, err := io.Copy(data, stream)
		_ = data.Close()
		sent <- err
	}()
	_, recvErr := io.Copy(stream, data)
	select {
	case err := <-remoteErr:
		if err != nil {
			return err
		}
	case <-ctx.Done():
	}
	if recvErr != nil && !errors.Is(recvErr, io.EOF) {
		return recvErr
	}
	return nil
}

// executor runs exec and attach requests against the host, over WebSockets, falling back to
// SPDY where the host does not upgrade.
func (p *provider) executor(u *url.URL) (remotecommand.Executor, error) {
	ws, err := remotecommand.NewWebSocketExecutor(p.hostREST, http.MethodGet, u.String())
	if err != nil {
		return nil, err
	}
	sp, err := remotecommand.NewSPDYExecutor(p.hostREST, http.MethodPost, u)
	if err != nil {
		return nil, err
	}
	return remotecommand.NewFallbackExecutor(ws, sp, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
}

// sizeQueue passes the tenant terminal's size changes on.
type sizeQueue <-chan api.TermSize

func (q sizeQueue) Next() *remotecommand.TerminalSize {
	s, ok := <-q
	if !ok {
		return nil
	}
	return &remotecommand.TerminalSize{Width: s.Width, Height: s.Height}
}
