package check

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// manifests are the documents of every deploy/kubernetes/*.yaml, decoded
// strictly.
type manifests struct {
	deployments []*appsv1.Deployment
	secrets     []*corev1.Secret
	policies    []*networkingv1.NetworkPolicy
}

func loadManifests(t *testing.T) manifests {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(repoRoot(t), "deploy/kubernetes/*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var m manifests
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range splitDocuments(b) {
			obj, err := decodeStrict(doc)
			if err != nil {
				t.Fatalf("%s document %d: %v", filepath.Base(file), i+1, err)
			}
			switch o := obj.(type) {
			case *appsv1.Deployment:
				m.deployments = append(m.deployments, o)
			case *corev1.Secret:
				m.secrets = append(m.secrets, o)
			case *networkingv1.NetworkPolicy:
				m.policies = append(m.policies, o)
			}
		}
	}
	return m
}

// TestKubernetesNetworkPolicy: every `solo run` Deployment of
// deploy/kubernetes is selected by NetworkPolicies that admit ingress only
// from Prometheus's pods to its http port (the kubelet's probes come from
// the pod's own node, which Kubernetes always admits), and egress to DNS
// and to the Redis port of its Secret's URL.
func TestKubernetesNetworkPolicy(t *testing.T) {
	m := loadManifests(t)
	checked := 0
	for _, d := range m.deployments {
		c := d.Spec.Template.Spec.Containers[0]
		if len(c.Command) < 2 || !strings.HasSuffix(c.Command[0], "/solo") || c.Command[1] != "run" {
			continue // an embedded service: its policy must admit its own clients too
		}
		checked++
		var in, out []*networkingv1.NetworkPolicy
		for _, p := range m.policies {
			if !selects(t, p, d) {
				continue
			}
			if slices.Contains(p.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) {
				in = append(in, p)
			}
			if slices.Contains(p.Spec.PolicyTypes, networkingv1.PolicyTypeEgress) {
				out = append(out, p)
			}
		}
		if len(in) == 0 || len(out) == 0 {
			t.Errorf("Deployment %s: %d ingress and %d egress NetworkPolicies select its pods, want both", d.Name, len(in), len(out))
			continue
		}
		checkIngress(t, d, in)
		checkEgress(t, d, out, m.secrets)
	}
	if checked == 0 {
		t.Fatal("no solo run Deployment in deploy/kubernetes")
	}
}

// selects reports whether p's podSelector (matchLabels only) selects the
// pods of d.
func selects(t *testing.T, p *networkingv1.NetworkPolicy, d *appsv1.Deployment) bool {
	t.Helper()
	if len(p.Spec.PodSelector.MatchExpressions) > 0 || len(p.Spec.PodSelector.MatchLabels) == 0 {
		t.Fatalf("NetworkPolicy %s: want a podSelector of matchLabels only", p.Name)
	}
	for k, v := range p.Spec.PodSelector.MatchLabels {
		if d.Spec.Template.Labels[k] != v {
			return false
		}
	}
	return true
}

// checkIngress checks that the ingress rules of ps admit only named pods
// (a pod selector in every peer; no IP block, no empty from) to the
// container's http port, Prometheus among them on the port its annotation
// names.
func checkIngress(t *testing.T, d *appsv1.Deployment, ps []*networkingv1.NetworkPolicy) {
	t.Helper()
	c := d.Spec.Template.Spec.Containers[0]
	httpPort := int32(0)
	for _, p := range c.Ports {
		if p.Name == "http" {
			httpPort = p.ContainerPort
		}
	}
	if httpPort == 0 || c.LivenessProbe.HTTPGet.Port.String() != "http" || c.ReadinessProbe.HTTPGet.Port.String() != "http" {
		t.Fatalf("Deployment %s: want a container port named http, probed by both probes", d.Name)
	}
	if a := d.Spec.Template.Annotations["prometheus.io/port"]; a != strconv.Itoa(int(httpPort)) {
		t.Errorf("Deployment %s: prometheus.io/port %q, want the http port %d", d.Name, a, httpPort)
	}
	prometheus := false
	for _, p := range ps {
		for i, r := range p.Spec.Ingress {
			what := fmt.Sprintf("NetworkPolicy %s ingress rule %d", p.Name, i+1)
			if len(r.From) == 0 || len(r.Ports) == 0 {
				t.Errorf("%s: admits every source or every port; want named pods to the http port", what)
			}
			for _, port := range r.Ports {
				if port.Port == nil || !samePort(*port.Port, "http", httpPort) || port.Protocol == nil || *port.Protocol != corev1.ProtocolTCP {
					t.Errorf("%s: port %v, want TCP http (%d) only", what, port.Port, httpPort)
				}
			}
			for _, peer := range r.From {
				if peer.IPBlock != nil || peer.PodSelector == nil || len(peer.PodSelector.MatchLabels)+len(peer.PodSelector.MatchExpressions) == 0 {
					t.Errorf("%s: a peer %+v that is not named pods", what, peer)
					continue
				}
				for _, v := range peer.PodSelector.MatchLabels {
					if strings.Contains(v, "prometheus") && peer.NamespaceSelector != nil {
						prometheus = true
					}
				}
			}
		}
	}
	if !prometheus {
		t.Errorf("Deployment %s: no ingress rule admits Prometheus's pods (in their namespace)", d.Name)
	}
}

// checkEgress checks that ps admit DNS (UDP and TCP 53) and the Redis
// port of the URL in the Secret the container reads SOLO_REDIS_URL from.
func checkEgress(t *testing.T, d *appsv1.Deployment, ps []*networkingv1.NetworkPolicy, secrets []*corev1.Secret) {
	t.Helper()
	redisPort := 0
	for _, e := range d.Spec.Template.Spec.Containers[0].Env {
		if e.Name != "SOLO_REDIS_URL" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
			continue
		}
		ref := e.ValueFrom.SecretKeyRef
		for _, s := range secrets {
			if s.Name != ref.Name {
				continue
			}
			u, err := url.Parse(s.StringData[ref.Key])
			if err != nil {
				t.Fatalf("Secret %s %s: %v", s.Name, ref.Key, err)
			}
			redisPort = 6379
			if p := u.Port(); p != "" {
				redisPort, _ = strconv.Atoi(p)
			}
		}
	}
	if redisPort == 0 {
		t.Fatalf("Deployment %s: no Secret holds its SOLO_REDIS_URL", d.Name)
	}
	for _, want := range []struct {
		proto corev1.Protocol
		port  int
	}{{corev1.ProtocolUDP, 53}, {corev1.ProtocolTCP, 53}, {corev1.ProtocolTCP, redisPort}} {
		if !admitsEgress(ps, want.proto, want.port) {
			t.Errorf("Deployment %s: no egress rule admits %s %d", d.Name, want.proto, want.port)
		}
	}
}

func admitsEgress(ps []*networkingv1.NetworkPolicy, proto corev1.Protocol, port int) bool {
	for _, p := range ps {
		for _, r := range p.Spec.Egress {
			for _, rp := range r.Ports {
				if rp.Protocol != nil && *rp.Protocol == proto && rp.Port != nil && rp.Port.Type == intstr.Int && rp.Port.IntValue() == port {
					return true
				}
			}
		}
	}
	return false
}

// samePort reports whether p names the container port name or its
// number.
func samePort(p intstr.IntOrString, name string, number int32) bool {
	if p.Type == intstr.String {
		return p.StrVal == name
	}
	return p.IntVal == number
}
