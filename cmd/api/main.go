// Command api is the payments service: the HTTP API that writes each payment and its
// PaymentCreated event in one transaction, and the outbox relay that publishes the
// events to Kafka after the commit. The API itself never waits on Kafka.
//
//	api                               serve (configured by environment, see config.go)
//	api migrate --database-url URL    apply the migrations and exit
//	api keys create --merchant NAME   create a merchant's API key (keys.go)
//	api keys revoke ID                revoke one
//	api cdc drop-slot                 drop the CDC relay's replication slot (slotcmd.go)
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/dscourse/payments-outbox/internal/tracing"
	"github.com/dscourse/payments-outbox/migrations"
)

func main() {
	if err := run(context.Background(), os.Args, os.Getenv, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "api:", err)
		os.Exit(1)
	}
}

// run is the whole program, with its dependencies on the process passed in, so that
// tests run it in-process: it returns when ctx is canceled or SIGINT/SIGTERM arrives,
// after an orderly shutdown.
func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	logger := slog.New(slog.NewJSONHandler(stdout, nil))

	if len(args) > 1 {
		switch args[1] {
		case "migrate":
			return migrations.Payments.Command(ctx, args[2:], getenv, stdout, logger)
		case "keys":
			return runKeys(ctx, args[2:], getenv, stdout)
		case "cdc":
			return runCDC(ctx, args[2:], getenv, stdout)
		default:
			return fmt.Errorf("unknown command %q: run without arguments to serve, or with \"migrate --database-url URL\", \"keys create --merchant NAME\" or \"cdc drop-slot\"", args[1])
		}
	}
	cfg, err := loadConfig(getenv)
	if err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	// Off unless the standard OTEL_* variables ask for an OTLP exporter.
	tp, stopTracing, err := tracing.NewProvider(ctx, "payments-api", getenv)
	if err != nil {
		return fmt.Errorf("tracing: %w", err)
	}
	defer tracing.Shutdown(ctx, stopTracing, logger)
	return serve(ctx, cfg, logger, tp)
}
