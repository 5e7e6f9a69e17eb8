package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
)

// The local cluster's S3-compatible server ("local s3"), for snapshots stored in a bucket
// (VirtualClusterSnapshot spec.s3): gofakes3, an implementation of the S3 API in Go, its
// objects in memory (gone when it stops: test-only). Pods reach it on the bridge. It checks
// no signature: any access key works. A bucket is made on first use.

// startS3 runs "local s3" as a supervised process of this machine.
func (c config) startS3() error {
	bin, err := c.selfCopy()
	if err != nil {
		return err
	}
	return c.startSupervised(s3Process, "", bin, "s3", "--output", c.outDir, "--state-dir", c.stateDir, "--run-dir", c.runDir)
}

func runS3(ctx context.Context, c config) error {
	backend := s3mem.New()
	server := &http.Server{
		Addr:              net.JoinHostPort(bridgeIP, s3Port),
		Handler:           gofakes3.New(backend, gofakes3.WithAutoBucket(true)).Server(),
		ReadHeaderTimeout: 10 * time.Second,
	}
	go func() {
		<-ctx.Done()
		_ = server.Close()
	}()
	logf("S3 API on http://%s (objects in memory)", server.Addr)
	if err := server.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serving S3: %w", err)
	}
	return nil
}
