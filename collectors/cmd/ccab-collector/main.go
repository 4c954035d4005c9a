// Command ccab-collector is the edge collector of ccab: it turns what an edge host can see
// (ss output, nginx access logs) into the wire records of contracts/CONTRACTS.md.
//
// main only wires things: the subcommands live in collectors/internal/cli; add one by
// writing its Command and listing it here.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/ccab-dev/ccab/collectors/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	commands := []cli.Command{
		cli.ParseSS(),
		cli.ParseNginx(),
		cli.Sample(),
		runCommand(),
	}
	status := cli.Dispatch(ctx, cli.OSEnv(), "ccab-collector", commands, os.Args[1:])
	stop()
	os.Exit(status)
}
