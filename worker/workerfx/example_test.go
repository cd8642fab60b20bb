package workerfx_test

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
	"go.uber.org/fx"

	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/worker"
	"github.com/solo-run/solo/worker/workerfx"
)

// The fx module: the application provides the Redis client and owns the
// election's tunables; jobs join through a value group.
func ExampleModule() {
	err := fx.ValidateApp(
		fx.NopLogger,
		fx.Provide(func() redis.UniversalClient { return redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"}) }),
		workerfx.Module(leader.Config{Name: "orders-sync"}, workerfx.WithHTTP("127.0.0.1:8080")),
		fx.Provide(workerfx.AsJob(func() worker.Job {
			return worker.PullJob("consume-orders", func(ctx context.Context) error { <-ctx.Done(); return nil })
		})),
	)
	fmt.Println(err)
	// Output: <nil>
}
