package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/solo-run/solo/examples/internal/proctest"
	"github.com/solo-run/solo/internal/redistest"
	"github.com/solo-run/solo/leader"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestFxApp runs the service as a process configured only through SOLO_*
// variables: it leads, runs both jobs, serves /leader and /metrics, and on
// SIGTERM drains, releases the lease and exits 0.
func TestFxApp(t *testing.T) {
	srv := redistest.Start(t)
	bin := proctest.Build(t, ".")
	addr := fmt.Sprintf("127.0.0.1:%d", proctest.FreePort(t))
	p := proctest.Start(t, "fxapp", bin, []string{
		"SOLO_REDIS_URL=redis://" + srv.Addr() + "/0",
		"SOLO_HTTP_ADDR=" + addr,
		"SOLO_ELECTION_TTL=3s",
	}, "-report-schedule", "@every 1s")

	httpc := &http.Client{Timeout: 5 * time.Second}
	defer httpc.CloseIdleConnections()
	get := func(path string) (int, string, error) {
		resp, err := httpc.Get("http://" + addr + path)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), err
	}

	// /leader says leader once the first term has started.
	var info struct { // /leader's JSON body, the fields this test reads
		Election string `json:"election"`
		Holder   *struct {
			ID   string `json:"id"`
			Term uint64 `json:"term"`
		} `json:"holder"`
		Self struct {
			ID   string `json:"id"`
			Role string `json:"role"`
			Term uint64 `json:"term"`
		} `json:"self"`
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, body, err := get("/leader")
		if err == nil && code == http.StatusOK {
			if err := json.Unmarshal([]byte(body), &info); err != nil {
				t.Fatalf("/leader: %v: %s", err, body)
			}
			if info.Self.Role == "leader" {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("/leader never said role leader: last %d %q %v", code, body, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if info.Election != "fxapp" || info.Holder == nil || info.Holder.ID != info.Self.ID || info.Holder.Term != info.Self.Term {
		t.Fatalf("/leader = %+v", info)
	}
	for _, msg := range []string{"polled orders", "report generated"} {
		line, _, err := p.Await(0, 15*time.Second, proctest.Msg(msg))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(line, fmt.Sprintf(`"term":%d`, info.Self.Term)) {
			t.Fatalf("%q logged without the term %d: %s", msg, info.Self.Term, line)
		}
	}
	code, body, err := get("/metrics")
	if err != nil || code != http.StatusOK {
		t.Fatalf("/metrics = %d, %v", code, err)
	}
	for _, want := range []string{
		`solo_election_leader{election="fxapp"} 1`,
		`solo_job_runs_total{election="fxapp",job="nightly-report"}`,
		"go_goroutines",
	} {
		if !strings.Contains(body, want) {
			t.Fatalf("/metrics lacks %q:\n%s", want, body)
		}
	}

	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code, err := p.Wait(30 * time.Second); err != nil || code != 0 {
		t.Fatalf("exit = %d, %v; want 0", code, err)
	}
	if _, _, err := p.Await(0, time.Second, proctest.Msg("stopped consuming orders")); err != nil {
		t.Fatal("the pull job was not drained: ", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg := leader.Config{Name: "fxapp", TTL: 3 * time.Second}
	if h, err := leader.Lookup(ctx, srv.Client(t), cfg); !errors.Is(err, leader.ErrNoLeader) {
		t.Fatalf("after exit: Lookup() = %+v, %v; want ErrNoLeader (released)", h, err)
	}
}
