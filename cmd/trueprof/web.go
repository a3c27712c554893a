package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"trueprof/internal/model"
	"trueprof/internal/web"
)

func serveCmd() *cobra.Command {
	var in, addr string
	var agg model.Aggregation
	c := &cobra.Command{
		Use:   "serve",
		Short: "Serve a trace's web UI (functions, detail, call graph, flame graph, source, timeline) on loopback",
		Long: `Serve the web UI of one trace file, like go tool pprof -http.

The server listens on 127.0.0.1 on a free port unless --http says otherwise,
prints the URL and opens nothing by itself. It only answers GET requests,
writes no files, and reads only the trace, the source files its locations
name and the modules they are in (for disassembly). Ctrl-C stops it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ready := func(url string) { fmt.Fprintf(cmd.OutOrStdout(), "trueprof: serving %s at %s\n", in, url) }
			// The page's data come from one pass over the records,
			// none of which is held; a trace the stream cannot take is
			// loaded.
			s, err := streamProfile(in, cmd.ErrOrStderr(), agg)
			if err != nil {
				return err
			}
			err = web.ServeStream(cmd.Context(), addr, s, "trueprof: "+in, ready)
			if !errors.Is(err, model.ErrNotStreamable) {
				return err
			}
			p, err := loadProfile(in, io.Discard, agg) // the stream warned already
			if err != nil {
				return err
			}
			return web.Serve(cmd.Context(), addr, p, "trueprof: "+in, ready)
		},
	}
	c.Flags().StringVarP(&in, "input", "i", "trueprof.trace", "trace file to read")
	c.Flags().StringVar(&addr, "http", web.DefaultAddr, "address to listen on (host:port; port 0 picks a free one)")
	aggregationFlags(c, &agg)
	return c
}

// htmlOptions are the HTML report's options for the trace file in,
// opening with the threads f selects.
func htmlOptions(in string, f model.Filter) web.HTMLOptions {
	return web.HTMLOptions{Title: "trueprof: " + in, Filter: f, FilterLabel: f.String()}
}

// writeOutput runs write on the file out ("-" or empty: stdout); a
// failed write removes the file rather than leave half a report.
func writeOutput(stdout io.Writer, out string, write func(io.Writer) error) error {
	if out == "" || out == "-" {
		return write(stdout)
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		os.Remove(out)
		return err
	}
	return f.Close()
}
