package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/solo-run/solo/internal/redistest"
)

// openPTY opens a pseudo-terminal through /dev/ptmx: the master, and the
// slave for a child's stderr.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil { // unlockpt
		t.Fatal(err)
	}
	n, err := unix.IoctlGetUint32(int(m.Fd()), unix.TIOCGPTN) // ptsname
	if err != nil {
		t.Fatal(err)
	}
	s, err := os.OpenFile("/dev/pts/"+strconv.FormatUint(uint64(n), 10), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	return m, s
}

// solo's logs use the console encoder when stderr is a terminal and JSON
// otherwise; --log-format overrides. Mutation: with
// isTerminal always false this fails with "stderr a terminal, --log-format
// auto: want console lines".
func TestLogs_ConsoleOnATerminal(t *testing.T) {
	srv := redistest.Start(t)
	console := regexp.MustCompile(`(?m)^\d\d:\d\d:\d\d\.\d{3}\tINFO\t.*solo running`)
	for _, tt := range []struct {
		name        string
		tty         bool
		format      string
		wantConsole bool
	}{
		{"stderr a terminal, --log-format auto", true, "auto", true},
		{"stderr a terminal, --log-format json", true, "json", false},
		{"stderr a file, --log-format auto", false, "auto", false},
		{"stderr a file, --log-format console", false, "console", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command(soloBin, "run", "--once", "--log-format", tt.format, "--", "true")
			cmd.Env = testEnv("redis://"+srv.Addr(), electionName(t), "a")
			var out bytes.Buffer
			var read chan struct{}
			if tt.tty {
				master, slave := openPTY(t)
				defer master.Close()
				cmd.Stderr = slave
				read = make(chan struct{})
				go func() {
					defer close(read)
					_, err := io.Copy(&out, master) // ends with EIO once the slave is closed everywhere
					if err != nil && !errors.Is(err, unix.EIO) {
						t.Errorf("read the terminal: %v", err)
					}
				}()
				defer slave.Close()
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				slave.Close()
			} else {
				cmd.Stderr = &out
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("solo: %v", err)
				}
			case <-time.After(20 * time.Second):
				_ = cmd.Process.Kill()
				t.Fatal("solo did not exit")
			}
			if read != nil {
				<-read
			}
			text := strings.ReplaceAll(out.String(), "\r\n", "\n")
			isConsole := console.MatchString(text)
			isJSON := strings.Contains(text, `{"level":"info"`) && strings.Contains(text, `"msg":"solo running"`)
			if tt.wantConsole && (!isConsole || isJSON) {
				t.Fatalf("%s: want console lines:\n%s", tt.name, text)
			}
			if !tt.wantConsole && (isConsole || !isJSON) {
				t.Fatalf("%s: want JSON lines:\n%s", tt.name, text)
			}
		})
	}
}

// solo version prints the module version Go recorded in the binary:
// "(devel)" from a work tree, or a (pseudo-)version, the same that `go
// version -m` reads; a build without one takes -ldflags "-X
// main.version=…". Mutation: soloVersion ignoring the -ldflags variable
// fails with `-ldflags build: solo version = "solo (devel)\n", <nil>, want "solo
// v1.2.3-test\n"`.
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
		if want := "solo " + recorded[1] + " (protocol 1, shares an election with 1 and up)\n"; string(out) != want {
			t.Fatalf("solo %s = %q, want %q (the version recorded in the binary)", arg, out, want)
		}
	}
	bin := filepath.Join(t.TempDir(), "solo")
	if out, err := exec.Command("go", "build", "-tags", "solo_nodemo", "-ldflags", "-X main.version=v1.2.3-test", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version").Output()
	if want := "solo v1.2.3-test (protocol 1, shares an election with 1 and up)\n"; err != nil || string(out) != want {
		t.Fatalf("-ldflags build: solo version = %q, %v, want %q", out, err, want)
	}
}
