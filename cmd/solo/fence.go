package main

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx", for fence.dsn postgres://
	_ "modernc.org/sqlite"             // database/sql driver "sqlite", for fence.dsn sqlite:PATH

	"github.com/solo-run/solo/cmd/solo/internal/config"
	"github.com/solo-run/solo/leader/fence"
	"github.com/solo-run/solo/leader/redisurl"
)

// openFence opens the fence database of `solo run`, creates the fence table
// if it is missing and returns its guard. A database that cannot be reached
// within 10s fails the start (exit 1); a bad DSN or table name is a usage
// error (exit 2).
func openFence(ctx context.Context, cfg config.FenceConfig) (*fence.Guard, func(), error) {
	driver, source, err := config.FenceDriver(cfg.DSN)
	if err != nil {
		return nil, nil, usageErr("fence.dsn %q: %w", config.RedactDSN(cfg.DSN), err)
	}
	db, err := sql.Open(driver, source)
	if err != nil {
		return nil, nil, usageErr("fence.dsn %q: %w", config.RedactDSN(cfg.DSN), err)
	}
	var opts []fence.Option
	if cfg.Table != "" {
		opts = append(opts, fence.WithTable(cfg.Table))
	}
	guard, err := fence.New(db, opts...)
	if err != nil {
		_ = db.Close()
		return nil, nil, usageErr("fence.table %q: %w", cfg.Table, err)
	}
	ectx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := guard.EnsureTable(ectx); err != nil {
		_ = db.Close()
		return nil, nil, fmt.Errorf("fence database %s: %w", config.RedactDSN(cfg.DSN), redisurl.RedactError(err, cfg.DSN))
	}
	return guard, func() { _ = db.Close() }, nil
}
