package main

import (
	"fmt"
	"time"

	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"

	"github.com/kubenest-io/kubenest/pkg/activity"
)

// activityPeriod is how often the apiserver writes the time of the last request of a person
// into the tenant's activity Lease, when there was one since.
const activityPeriod = 10 * time.Second

// recordActivity has the apiserver note the requests of people (package activity): its
// authorizer, which sees every authenticated request, is wrapped in each server of the chain
// (only the outermost one's filters run, but which that is is upstream's business).
func recordActivity(config *apiserver.Config) *activity.Recorder {
	recorder := activity.NewRecorder()
	for _, c := range []*genericapiserver.Config{config.KubeAPIs.ControlPlane.Generic,
		&config.ApiExtensions.GenericConfig.Config, &config.Aggregator.GenericConfig.Config} {
		c.Authorization.Authorizer = recorder.Authorizer(c.Authorization.Authorizer)
	}
	return recorder
}

// addActivityHook writes what recorder saw into the activity Lease while the apiserver runs.
func addActivityHook(s *genericapiserver.GenericAPIServer, recorder *activity.Recorder) {
	s.AddPostStartHookOrDie("kubenest/activity", func(hook genericapiserver.PostStartHookContext) error {
		client, err := kubernetes.NewForConfig(hook.LoopbackClientConfig)
		if err != nil {
			return fmt.Errorf("loopback client: %w", err)
		}
		klog.InfoS("Recording the last request of a person", "lease", activity.LeaseNamespace+"/"+activity.LeaseName, "every", activityPeriod)
		go recorder.Run(hook, client, activityPeriod)
		return nil
	})
}
