package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
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
