package virtualcluster

import (
	"context"
	"errors"
	"net"
	"testing"

	"github.com/kubenest-io/kubenest/internal/tenantclient"
	"github.com/kubenest-io/kubenest/pkg/controlplane"
)

// The published endpoint holds Ready back only while it refuses connections.
func TestCheckEndpoint(t *testing.T) {
	open, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refusing := closed.Addr().String()
	_ = closed.Close()

	ctx := context.Background()
	direct := &Reconciler{}
	nodePort := func(hostPort string) controlplane.Exposure {
		return controlplane.Exposure{Address: "127.0.0.1", Endpoint: "https://" + hostPort}
	}
	if err := direct.checkEndpoint(ctx, nodePort(open.Addr().String())); err != nil {
		t.Errorf("listening endpoint: %v", err)
	}
	var refused *endpointRefusedError
	if err := direct.checkEndpoint(ctx, nodePort(refusing)); !errors.As(err, &refused) || refused.endpoint != "https://"+refusing {
		t.Errorf("refusing endpoint: %v, want an endpointRefusedError naming it", err)
	}

	unreachable := &Reconciler{Tenants: &tenantclient.Registry{Dial: func(context.Context, string, string) (net.Conn, error) {
		return nil, errors.New("no route to host")
	}}}
	if err := unreachable.checkEndpoint(ctx, nodePort(refusing)); err != nil {
		t.Errorf("an endpoint the operator cannot reach: %v, want no error (nothing is known about it)", err)
	}
	dialed := false
	inCluster := &Reconciler{Tenants: &tenantclient.Registry{Dial: func(context.Context, string, string) (net.Conn, error) {
		dialed = true
		return nil, errors.New("unexpected")
	}}}
	if err := inCluster.checkEndpoint(ctx, controlplane.Exposure{Endpoint: "https://vc-apiserver.ns.svc:443"}); err != nil || dialed {
		t.Errorf("ClusterIP endpoint: %v, dialed %v; want nothing checked (the Service was probed)", err, dialed)
	}
}
