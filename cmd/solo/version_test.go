package main

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/solo-run/solo/internal/redistest"
)

// solo version prints the module version Go recorded in the binary:
// "(devel)" from a work tree, or a (pseudo-)version, the same that `go
// version -m` reads, then the commit and the Go release; a build without
// a module version takes -ldflags "-X
// github.com/solo-run/solo/internal/version.version=…" (and .commit=…).
// That build's solo run logs its version and protocol at start and
// exports solo_build_info{version,protocol,goversion} 1 on /metrics.
// Mutation: Get ignoring the -ldflags variable fails with `-ldflags build:
// solo version = "solo (devel) …"`. Old code: no commit or Go line, no
// protocol in the start-up line, no solo_build_info.
func TestVersion(t *testing.T) {
	info, err := exec.Command("go", "version", "-m", soloBin).Output()
	if err != nil {
		t.Fatal(err)
	}
	recorded := regexp.MustCompile(`(?m)^\tmod\tgithub.com/solo-run/solo\t(\S+)`).FindStringSubmatch(string(info))
	if recorded == nil {
		t.Fatalf("go version -m: no module line:\n%s", info)
	}
	for _, arg := range []string{"version", "--version", "-version"} {
		out, err := exec.Command(soloBin, arg).Output()
		if err != nil {
			t.Fatal(err)
		}
		first, rest, _ := strings.Cut(string(out), "\n")
		if want := "solo " + recorded[1] + " (protocol 1, shares an election with 1 and up)"; first != want {
			t.Fatalf("solo %s = %q, want %q (the version recorded in the binary)", arg, first, want)
		}
		if !regexp.MustCompile(`^commit: \S+\ngo: ` + regexp.QuoteMeta(runtime.Version()) + `\n$`).MatchString(rest) {
			t.Fatalf("solo %s: %q, want the commit and go lines", arg, rest)
		}
	}
	bin := filepath.Join(t.TempDir(), "solo")
	const pkg = "github.com/solo-run/solo/internal/version"
	if out, err := exec.Command("go", "build", "-tags", "solo_nodemo", "-ldflags",
		"-X "+pkg+".version=v1.2.3-test -X "+pkg+".commit=0123abcd", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version").Output()
	if want := "solo v1.2.3-test (protocol 1, shares an election with 1 and up)\ncommit: 0123abcd\ngo: " + runtime.Version() + "\n"; err != nil || string(out) != want {
		t.Fatalf("-ldflags build: solo version = %q, %v, want %q", out, err, want)
	}

	srv := redistest.Start(t)
	addr := freeAddr(t)
	p := startBin(t, bin, append(testEnv("redis://"+srv.Addr()+"/0", electionName(t), "a"), "SOLO_HTTP_ADDR="+addr), "run", "--", "sleep", "600")
	var body string
	waitFor(t, 10*time.Second, "/metrics", func() bool {
		var code int
		code, body = httpGet(t, "http://"+addr+"/metrics")
		return code == 200
	})
	if want := `solo_build_info{goversion="` + runtime.Version() + `",protocol="1",version="v1.2.3-test"} 1`; !strings.Contains(body, want) {
		t.Fatalf("solo run's /metrics lacks %s:\n%s", want, body)
	}
	p.signal(syscall.SIGTERM)
	p.wait(10 * time.Second)
	if !regexp.MustCompile(`"msg":"solo running".*"version":"v1.2.3-test","protocol":1`).MatchString(p.output()) {
		t.Fatalf("the start-up line lacks the version and protocol:\n%s", p.output())
	}
}
