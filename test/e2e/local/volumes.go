package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v13/controller"
)

// The local cluster's volumes: every node of it is this machine, so a volume is a directory
// of this machine that "local volumes", a process of its own, makes and removes directly,
// with sig-storage-lib-external-provisioner's controller. A provisioner that runs a helper pod
// per volume (Rancher's local-path, which this replaced) put a pod's start and end on the way
// of every claim: 5 s of each default VirtualCluster's creation, and a queue of helper pods
// behind everything else when many are created at once.
const (
	volumesProcess     = "volumes"                   // its name among the recorded processes and logs
	volumesProvisioner = "kubenest.io/local-volumes" // the StorageClass's provisioner
)

func (c config) volumesDir() string { return filepath.Join(c.stateDir, "volumes") }

// startVolumes runs "local volumes" as a supervised process of this machine.
func (c config) startVolumes() error {
	bin, err := c.selfCopy()
	if err != nil {
		return err
	}
	return c.startSupervised(volumesProcess, "", bin, "volumes", "--output", c.outDir, "--state-dir", c.stateDir, "--run-dir", c.runDir)
}

func runVolumes(ctx context.Context, c config) error {
	client, err := c.hostClient(0)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(c.volumesDir(), 0o755); err != nil {
		return err
	}
	logf("provisioning %s volumes under %s", volumesProvisioner, c.volumesDir())
	controller.NewProvisionController(ctx, client, volumesProvisioner, &localVolumes{dir: c.volumesDir()},
		controller.LeaderElection(false)).Run(ctx)
	return nil
}

// localVolumes provisions a claim as a directory named after its volume, on the node its
// first pod was scheduled to (the StorageClass binds on first consumer).
type localVolumes struct{ dir string }

func (l *localVolumes) Provision(_ context.Context, o controller.ProvisionOptions) (*corev1.PersistentVolume, controller.ProvisioningState, error) {
	if o.SelectedNodeName == "" {
		return nil, controller.ProvisioningFinished, errors.New("no node selected: the StorageClass must bind on first consumer (volumeBindingMode: WaitForFirstConsumer)")
	}
	path := filepath.Join(l.dir, o.PVName)
	// Open to every user: the pod's processes may run as anyone.
	if err := os.Mkdir(path, 0o777); err != nil && !os.IsExist(err) {
		return nil, controller.ProvisioningInBackground, fmt.Errorf("making %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o777); err != nil {
		return nil, controller.ProvisioningInBackground, err
	}
	logf("claim %s/%s: volume %s at %s, on node %s", o.PVC.Namespace, o.PVC.Name, o.PVName, path, o.SelectedNodeName)
	reclaim := corev1.PersistentVolumeReclaimDelete
	if o.StorageClass.ReclaimPolicy != nil {
		reclaim = *o.StorageClass.ReclaimPolicy
	}
	return &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: o.PVName},
		Spec: corev1.PersistentVolumeSpec{
			PersistentVolumeReclaimPolicy: reclaim,
			AccessModes:                   o.PVC.Spec.AccessModes,
			VolumeMode:                    o.PVC.Spec.VolumeMode,
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: o.PVC.Spec.Resources.Requests[corev1.ResourceStorage]},
			MountOptions:                  o.StorageClass.MountOptions,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: path}},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{
					Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{o.SelectedNodeName},
				}},
			}}}},
		},
	}, controller.ProvisioningFinished, nil
}

// Delete removes a volume's directory, and only one of this provisioner's.
func (l *localVolumes) Delete(_ context.Context, pv *corev1.PersistentVolume) error {
	if pv.Spec.Local == nil {
		return fmt.Errorf("volume %s is not a local volume", pv.Name)
	}
	path := filepath.Clean(pv.Spec.Local.Path)
	if filepath.Dir(path) != l.dir || !strings.HasPrefix(filepath.Base(path), "pvc-") {
		return fmt.Errorf("volume %s is at %s, not a directory of %s", pv.Name, path, l.dir)
	}
	if err := os.RemoveAll(path); err != nil {
		return fmt.Errorf("removing %s: %w", path, err)
	}
	logf("volume %s removed (%s)", pv.Name, path)
	return nil
}
