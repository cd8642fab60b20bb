package main

import (
	"bufio"
	"errors"
	"io"
	"os"
	"sync"
	"time"
)

// prefixed gives a program a pipe for stdout and one for stderr and copies
// what comes through them to solo's own, each line prefixed (such as
// "[report] "), so that the output of several config jobs can be told
// apart. One goroutine per pipe, owned by the program's run: wait stops
// and awaits them.
type prefixed struct {
	stdout, stderr *os.File // the write ends, for the keeper and its program
	readers        []*os.File
	wg             sync.WaitGroup
}

// prefixDrain bounds how long wait lets the copies run after the keeper
// is gone: the pipes end when the last process holding them exits, and a
// process that escaped the tree (see docs/cli.md, "What it cannot do") could
// hold them for ever.
const prefixDrain = time.Second

func newPrefixed(prefix string, stdout, stderr io.Writer) (*prefixed, error) {
	p := &prefixed{}
	for _, side := range []struct {
		dst *(*os.File)
		out io.Writer
	}{{&p.stdout, stdout}, {&p.stderr, stderr}} {
		r, w, err := os.Pipe()
		if err != nil {
			p.closeWriters()
			p.wait()
			return nil, err
		}
		*side.dst = w
		p.readers = append(p.readers, r)
		p.wg.Go(func() { copyPrefixed(side.out, r, prefix) })
	}
	return p, nil
}

// closeWriters closes solo's copies of the write ends, once the keeper has
// its own (after its start, failed or not), so that the pipes end with the
// tree.
func (p *prefixed) closeWriters() {
	for _, f := range []*os.File{p.stdout, p.stderr} {
		if f != nil {
			_ = f.Close()
		}
	}
}

// wait waits for the copies to reach the end of the pipes, at most
// prefixDrain, then cuts them off.
func (p *prefixed) wait() {
	done := make(chan struct{})
	go func() { p.wg.Wait(); close(done) }()
	t := time.NewTimer(prefixDrain)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		for _, r := range p.readers {
			_ = r.Close() // unblocks the Read: pipes use the poller
		}
		<-done
	}
	for _, r := range p.readers {
		_ = r.Close()
	}
}

// copyPrefixed copies r to w until r ends, writing prefix before every
// line, each line (up to 64 KiB) in one Write so that the lines of
// concurrent jobs never mix. A longer line is written in pieces, the
// prefix before the first only. A failed write (a closed stderr) drops
// the output but keeps reading, so the program never blocks on it.
func copyPrefixed(w io.Writer, r io.Reader, prefix string) {
	br := bufio.NewReaderSize(r, 64<<10)
	buf := make([]byte, 0, len(prefix)+64<<10)
	start := true
	for {
		chunk, err := br.ReadSlice('\n')
		if len(chunk) > 0 {
			buf = buf[:0]
			if start {
				buf = append(buf, prefix...)
			}
			buf = append(buf, chunk...)
			start = chunk[len(chunk)-1] == '\n'
			if err != nil && !errors.Is(err, bufio.ErrBufferFull) && !start {
				buf = append(buf, '\n') // a last line without a newline
			}
			_, _ = w.Write(buf)
		}
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			return
		}
	}
}
