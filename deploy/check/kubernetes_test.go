package check

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"
)

// TestKubernetesManifests decodes every document of deploy/kubernetes/*.yaml
// strictly into its Kubernetes API type (an unknown or misspelt field, a
// duplicate key or a wrong type fails), then checks what solo needs of a
// Deployment: /livez and /readyz probes, and a grace period at least the
// formula written beside it. A file of NetworkPolicies only has no
// Deployment (TestKubernetesNetworkPolicy checks it).
func TestKubernetesManifests(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(repoRoot(t), "deploy/kubernetes/*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 2 {
		t.Fatalf("found %d manifests", len(files))
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			b, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			var configs []*corev1.ConfigMap
			var deployments []*appsv1.Deployment
			pdbs, policies := 0, 0
			for i, doc := range splitDocuments(b) {
				obj, err := decodeStrict(doc)
				if err != nil {
					t.Fatalf("document %d: %v", i+1, err)
				}
				switch o := obj.(type) {
				case *corev1.ConfigMap:
					configs = append(configs, o)
				case *appsv1.Deployment:
					deployments = append(deployments, o)
				case *policyv1.PodDisruptionBudget:
					pdbs++
				case *networkingv1.NetworkPolicy:
					policies++
				}
			}
			if len(deployments) == 0 && policies > 0 && pdbs == 0 {
				return
			}
			if len(deployments) == 0 || pdbs != len(deployments) {
				t.Fatalf("%d Deployments and %d PodDisruptionBudgets, want one budget per Deployment", len(deployments), pdbs)
			}
			for _, d := range deployments {
				checkDeployment(t, d, configs)
			}
		})
	}
}

// typeMeta is what a document says it is.
type typeMeta struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
}

// decodeStrict decodes one YAML document into the API type its apiVersion
// and kind name.
func decodeStrict(doc []byte) (any, error) {
	var tm typeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return nil, err
	}
	var obj any
	switch tm.APIVersion + " " + tm.Kind {
	case "v1 ConfigMap":
		obj = new(corev1.ConfigMap)
	case "v1 Secret":
		obj = new(corev1.Secret)
	case "v1 Service":
		obj = new(corev1.Service)
	case "apps/v1 Deployment":
		obj = new(appsv1.Deployment)
	case "policy/v1 PodDisruptionBudget":
		obj = new(policyv1.PodDisruptionBudget)
	case "networking.k8s.io/v1 NetworkPolicy":
		obj = new(networkingv1.NetworkPolicy)
	default:
		return nil, fmt.Errorf("unexpected apiVersion %q kind %q (add its type to decodeStrict)", tm.APIVersion, tm.Kind)
	}
	if err := yaml.UnmarshalStrict(doc, obj); err != nil {
		return nil, fmt.Errorf("%s %s: %w", tm.APIVersion, tm.Kind, err)
	}
	return obj, nil
}

// splitDocuments splits a multi-document YAML file on its "---" lines.
func splitDocuments(b []byte) [][]byte {
	var docs [][]byte
	for _, d := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(b), -1) {
		if strings.TrimSpace(stripComments(d)) != "" {
			docs = append(docs, []byte(d))
		}
	}
	return docs
}

func stripComments(s string) string {
	var out bytes.Buffer
	for line := range strings.SplitSeq(s, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			out.WriteString(line + "\n")
		}
	}
	return out.String()
}

// checkDeployment checks the probes and the grace period of d. For a solo
// run container (its command starts with solo run) the grace period must be
// at least solo run's exit bound with an http.addr and the default read
// timeout, election.shutdown_timeout (default ttl, default 10s) + 1s (the
// release) + 2s (HTTP shutdown) + 1s (log flush), and the container must
// tell solo the same number as SOLO_ELECTION_GRACE_PERIOD (Kubernetes does
// not show it to the container; solo refuses to start when it is shorter
// than its exit bound: cmd/solo's TestKubernetesManifest_GracePeriodPassesSolo
// runs solo's own loader on this file). For an embedded one,
// fx.StopTimeout (30s in examples/fxapp) + 5s.
func checkDeployment(t *testing.T, d *appsv1.Deployment, configs []*corev1.ConfigMap) {
	t.Helper()
	spec := d.Spec.Template.Spec
	if len(spec.Containers) == 0 {
		t.Fatalf("Deployment %s has no containers", d.Name)
	}
	c := spec.Containers[0]
	for _, p := range []struct {
		name  string
		probe *corev1.Probe
		path  string
	}{{"liveness", c.LivenessProbe, "/livez"}, {"readiness", c.ReadinessProbe, "/readyz"}} {
		if p.probe == nil || p.probe.HTTPGet == nil || p.probe.HTTPGet.Path != p.path {
			t.Errorf("Deployment %s: %s probe is not an HTTP GET of %s", d.Name, p.name, p.path)
		}
	}
	if spec.TerminationGracePeriodSeconds == nil {
		t.Fatalf("Deployment %s sets no terminationGracePeriodSeconds", d.Name)
	}
	grace := time.Duration(*spec.TerminationGracePeriodSeconds) * time.Second
	want := 30*time.Second + 5*time.Second // embedded: fx.StopTimeout + 5s
	if len(c.Command) >= 2 && strings.HasSuffix(c.Command[0], "/solo") && c.Command[1] == "run" {
		want = shutdownTimeout(t, configs) + 4*time.Second
		told := ""
		for _, e := range c.Env {
			if e.Name == "SOLO_ELECTION_GRACE_PERIOD" {
				told = e.Value
			}
		}
		if v, err := time.ParseDuration(told); err != nil || v != grace {
			t.Errorf("Deployment %s: SOLO_ELECTION_GRACE_PERIOD %q, want terminationGracePeriodSeconds %s (%q)", d.Name, told, grace, grace.String())
		}
	}
	if grace < want {
		t.Errorf("Deployment %s: terminationGracePeriodSeconds %s, want at least %s", d.Name, grace, want)
	}
}

// shutdownTimeout reads election.shutdown_timeout (default election.ttl,
// default 10s) from the config.yaml of the ConfigMaps.
func shutdownTimeout(t *testing.T, configs []*corev1.ConfigMap) time.Duration {
	t.Helper()
	for _, cm := range configs {
		data, ok := cm.Data["config.yaml"]
		if !ok {
			continue
		}
		var cfg struct {
			Election struct {
				TTL             string `json:"ttl"`
				ShutdownTimeout string `json:"shutdown_timeout"`
			} `json:"election"`
		}
		if err := yaml.Unmarshal([]byte(data), &cfg); err != nil {
			t.Fatalf("ConfigMap %s config.yaml: %v", cm.Name, err)
		}
		d := 10 * time.Second
		for _, s := range []string{cfg.Election.TTL, cfg.Election.ShutdownTimeout} {
			if s != "" {
				v, err := time.ParseDuration(s)
				if err != nil {
					t.Fatalf("ConfigMap %s: %v", cm.Name, err)
				}
				d = v
			}
		}
		return d
	}
	t.Fatal("no ConfigMap with a config.yaml for solo run")
	return 0
}
