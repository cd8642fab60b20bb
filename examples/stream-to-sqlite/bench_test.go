package main

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
)

// BenchmarkIngest measures the write path of the ingest, in process and
// without Redis: batches of 100 messages into SQLite (WAL, default
// synchronous), each batch one transaction, with and without the fencing
// check (one no-op UPDATE of the fence row at the start of the transaction).
// It reports messages per second; compare fenced with unfenced.
func BenchmarkIngest(b *testing.B) {
	for _, fenced := range []bool{true, false} {
		name := "unfenced"
		if fenced {
			name = "fenced"
		}
		b.Run(name, func(b *testing.B) {
			ctx := context.Background()
			db, err := openDB(filepath.Join(b.TempDir(), "bench.db"))
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			st, err := newStore(ctx, db, "bench", "bench-instance", fenced)
			if err != nil {
				b.Fatal(err)
			}
			const term = 1
			if err := st.claim(ctx, term); err != nil {
				b.Fatal(err)
			}
			batch := make([]message, readCount)
			sent := 0
			for b.Loop() {
				for i := range batch {
					sent++
					batch[i] = message{id: fmt.Sprintf("%d-0", sent), n: int64(sent)}
				}
				if _, err := st.write(ctx, term, batch); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(sent)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}
