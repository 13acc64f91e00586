// Package kubernetes checks the pod specs beside it offline, against the
// Kubernetes API's own types: each document decodes strictly (no unknown or
// duplicate field, every quantity and enum well formed) into the typed
// object of its apiVersion and kind, and holds the security boundary
// README.md describes.
package kubernetes

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

var errUnknownKind = errors.New("no typed object for this kind")

// decode decodes one YAML document strictly into the typed object of its
// apiVersion and kind.
func decode(doc []byte) (any, error) {
	var meta struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := yaml.Unmarshal(doc, &meta); err != nil {
		return nil, err
	}
	var obj any
	switch meta.APIVersion + "/" + meta.Kind {
	case "v1/Pod":
		obj = &corev1.Pod{}
	case "v1/ConfigMap":
		obj = &corev1.ConfigMap{}
	case "apps/v1/DaemonSet":
		obj = &appsv1.DaemonSet{}
	default:
		return nil, fmt.Errorf("%s %s: %w", meta.APIVersion, meta.Kind, errUnknownKind)
	}
	// UnmarshalStrict refuses duplicate and unknown fields; the typed
	// fields' own JSON decoders refuse a malformed quantity or port.
	if err := yaml.UnmarshalStrict(doc, obj); err != nil {
		return nil, fmt.Errorf("%s %s: %w", meta.APIVersion, meta.Kind, err)
	}
	return obj, nil
}

func load(t *testing.T, file string) []any {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var objs []any
	for _, doc := range bytes.Split(b, []byte("\n---\n")) {
		obj, err := decode(doc)
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		objs = append(objs, obj)
	}
	return objs
}

// loadWorkload loads file and returns its one object of type T and the
// names of the ConfigMaps beside it.
func loadWorkload[T any](t *testing.T, file string) (*T, []string) {
	t.Helper()
	var obj *T
	var cms []string
	for _, o := range load(t, file) {
		switch o := o.(type) {
		case *T:
			obj = o
		case *corev1.ConfigMap:
			cms = append(cms, o.Name)
		}
	}
	if obj == nil {
		t.Fatalf("%s has no %T", file, obj)
	}
	return obj, cms
}

func caps(c corev1.Container) (add, drop []corev1.Capability) {
	if c.SecurityContext == nil || c.SecurityContext.Capabilities == nil {
		return nil, nil
	}
	return c.SecurityContext.Capabilities.Add, c.SecurityContext.Capabilities.Drop
}

// checkPodSpec checks what README.md promises of every container and volume.
func checkPodSpec(t *testing.T, spec corev1.PodSpec, configMaps []string) {
	t.Helper()
	vols := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		vols[v.Name] = v
		if v.ConfigMap != nil && !slices.Contains(configMaps, v.ConfigMap.Name) {
			t.Errorf("volume %s names ConfigMap %s, which the file does not define", v.Name, v.ConfigMap.Name)
		}
	}
	for _, c := range spec.Containers {
		for _, m := range c.VolumeMounts {
			if _, ok := vols[m.Name]; !ok {
				t.Errorf("container %s mounts volume %s, which the pod does not define", c.Name, m.Name)
			}
		}
		add, drop := caps(c)
		if !slices.Contains(drop, "ALL") {
			t.Errorf("container %s does not drop ALL capabilities", c.Name)
		}
		if c.SecurityContext != nil && c.SecurityContext.Privileged != nil && *c.SecurityContext.Privileged {
			t.Errorf("container %s is privileged", c.Name)
		}
		if c.Name == "kbridge" {
			checkKbridgeHardened(t, c)
			if !slices.Contains(add, "NET_ADMIN") {
				t.Errorf("kbridge's container lacks NET_ADMIN, which creating kb0 needs")
			}
			if c.LivenessProbe == nil {
				t.Errorf("kbridge's container has no liveness probe")
			}
			continue
		}
		if slices.Contains(add, "NET_ADMIN") || slices.Contains(add, "SYS_ADMIN") {
			t.Errorf("the app's container %s is granted %v: the boundary is that only kbridge's has NET_ADMIN", c.Name, add)
		}
	}
}

// checkKbridgeHardened checks kbridge's container as README.md describes
// it: no privilege escalation, a read-only root (its runtime directory
// /run/kbridge a volume), the runtime's default seccomp profile.
func checkKbridgeHardened(t *testing.T, c corev1.Container) {
	t.Helper()
	sc := c.SecurityContext
	if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("kbridge's container does not set allowPrivilegeEscalation: false")
	}
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("kbridge's container does not set readOnlyRootFilesystem: true")
	}
	if sc == nil || sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("kbridge's container does not set seccompProfile: RuntimeDefault")
	}
	if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == "/run/kbridge" }) {
		t.Errorf("kbridge's container has no volume at /run/kbridge: its control socket would need a writable root")
	}
}

// checkMetrics checks where the metrics listen: with the scrape annotation,
// on the pod's address (--metrics from status.podIP); never on 0.0.0.0 in
// the ConfigMap, which would serve kb0's address too.
func checkMetrics(t *testing.T, file string, spec corev1.PodSpec, annotations map[string]string) {
	t.Helper()
	for _, o := range load(t, file) {
		if cm, ok := o.(*corev1.ConfigMap); ok && strings.Contains(cm.Data["kbridge.yaml"], "0.0.0.0") {
			t.Errorf("%s: ConfigMap %s puts something on 0.0.0.0, kb0's address among them", file, cm.Name)
		}
	}
	for _, c := range spec.Containers {
		if c.Name != "kbridge" {
			continue
		}
		i := slices.Index(c.Args, "--metrics")
		scraped := annotations["prometheus.io/scrape"] == "true"
		if !scraped {
			if i >= 0 {
				t.Errorf("%s: kbridge serves metrics on %s though nothing scrapes them", file, c.Args[i+1])
			}
			continue
		}
		if i < 0 || i+1 >= len(c.Args) || c.Args[i+1] != "[$(POD_IP)]:"+annotations["prometheus.io/port"] {
			t.Errorf("%s: scraped, kbridge's args %v do not put the metrics on the pod's address and the annotated port", file, c.Args)
		}
		if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
			return e.Name == "POD_IP" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "status.podIP"
		}) {
			t.Errorf("%s: kbridge's container has no POD_IP from status.podIP", file)
		}
	}
}

func TestTheSidecarPodDecodesStrictlyAndOnlyKbridgeHasNetAdmin(t *testing.T) {
	pod, cms := loadWorkload[corev1.Pod](t, "sidecar.yaml")
	if len(pod.Spec.Containers) != 2 {
		t.Fatalf("the pod has %d containers, want the app and kbridge", len(pod.Spec.Containers))
	}
	checkPodSpec(t, pod.Spec, cms)
	if p := pod.Spec.ShareProcessNamespace; p == nil || !*p {
		t.Errorf("the pod does not share one PID namespace: kbridge would not see the app exit")
	}
	for _, c := range pod.Spec.Containers {
		if _, ok := c.Resources.Limits["hugepages-2Mi"]; !ok {
			t.Errorf("container %s has no hugepages-2Mi limit: the pod's hugetlbfs would be empty", c.Name)
		}
	}
	if pod.Annotations["prometheus.io/scrape"] != "true" {
		t.Errorf("the pod lacks Prometheus's scrape annotation")
	}
	checkMetrics(t, "sidecar.yaml", pod.Spec, pod.Annotations)
}

func TestTheVhostSidecarPodDecodesStrictlyAndSharesOnlyTheSocket(t *testing.T) {
	pod, cms := loadWorkload[corev1.Pod](t, "sidecar-vhost.yaml")
	checkPodSpec(t, pod.Spec, cms)
	checkMetrics(t, "sidecar-vhost.yaml", pod.Spec, pod.Annotations)
	// kbridge's own EAL may have volumes of its own (its runtime
	// directory, on a read-only root): what the two mount alike is the
	// socket's volume alone.
	mounts := map[string][]string{}
	for _, c := range pod.Spec.Containers {
		for _, m := range c.VolumeMounts {
			mounts[m.Name] = append(mounts[m.Name], c.Name)
		}
	}
	for vol, by := range mounts {
		if len(by) > 1 && vol != "vhost" {
			t.Errorf("containers %v share volume %s: in mode vhost the two share the socket alone", by, vol)
		}
	}
}

func TestTheDaemonSetDecodesStrictlyAndRunsInTheHostsNamespace(t *testing.T) {
	ds, cms := loadWorkload[appsv1.DaemonSet](t, "daemonset.yaml")
	if !ds.Spec.Template.Spec.HostNetwork {
		t.Errorf("the DaemonSet is not in the host's network namespace, where the node's app is")
	}
	if !ds.Spec.Template.Spec.HostPID {
		t.Errorf("the DaemonSet is not in the host's PID namespace: kbridge would not see the node's app exit")
	}
	checkPodSpec(t, ds.Spec.Template.Spec, cms)
	checkMetrics(t, "daemonset.yaml", ds.Spec.Template.Spec, ds.Spec.Template.Annotations)
}

func TestAnUnknownFieldIsRefused(t *testing.T) {
	doc := []byte("apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec:\n  containers: [{name: a, image: b, capabilities: {add: [NET_ADMIN]}}]\n")
	if _, err := decode(doc); err == nil {
		t.Fatal("a capability outside securityContext decoded without an error")
	}
}
