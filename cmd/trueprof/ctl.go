package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"trueprof/internal/control"
)

// ctlCmd is `trueprof ctl`: it talks to running recordings of this user
// through internal/control.
func ctlCmd() *cobra.Command {
	var session string
	c := &cobra.Command{
		Use:   "ctl",
		Short: "Control running recordings: list, status, snapshot, pause, resume, reset, stop, trace add|remove, root",
		Long: `Control a running trueprof record of this user through its control socket
(docs/control.md). With one recording running --session is not needed.`,
	}
	c.PersistentFlags().StringVar(&session, "session", "", "the recording to control (an id of ctl list)")
	c.AddCommand(&cobra.Command{
		Use:   "list",
		Short: "List the running recordings of this user",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			dir, err := control.Dir()
			if err != nil {
				return err
			}
			list, err := control.List(dir)
			if err != nil {
				return err
			}
			for _, s := range list {
				fmt.Fprintln(cmd.OutOrStdout(), control.Describe(s))
			}
			if len(list) == 0 {
				fmt.Fprintln(cmd.ErrOrStderr(), "trueprof: no recording is running")
			}
			return nil
		},
	})
	var format string
	status := &cobra.Command{
		Use:   "status",
		Short: "Show a recording's target, counts, bytes written, probes and pauses",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if format != "text" && format != "json" {
				return fmt.Errorf("--format %q: want text or json", format)
			}
			ans, err := ctlCall(session, control.Request{Cmd: control.CmdStatus}, nil)
			if err != nil {
				return err
			}
			if format == "json" {
				e := json.NewEncoder(cmd.OutOrStdout())
				e.SetIndent("", "  ")
				return e.Encode(ans.Status)
			}
			writeStatus(cmd.OutOrStdout(), ans.Status)
			return nil
		},
	}
	status.Flags().StringVar(&format, "format", "text", "text | json")
	var out string
	snapshot := &cobra.Command{
		Use:   "snapshot -o FILE",
		Short: "Write a complete trace of everything recorded so far; the recording goes on",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// ctl opens the file with its own rights and sends the
			// descriptor: the recorder never opens a path it is given.
			f, err := os.OpenFile(out, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
			if err != nil {
				return err
			}
			ans, err := ctlCall(session, control.Request{Cmd: control.CmdSnapshot}, f)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				os.Remove(out)
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "trueprof: snapshot of %s written to %s (%s)\n", ans.Status.Output, out, formatBytes(ans.Bytes))
			return nil
		},
	}
	snapshot.Flags().StringVarP(&out, "output", "o", "", "trace file to write")
	snapshot.MarkFlagRequired("output")
	c.AddCommand(status, snapshot)
	for _, sc := range []struct{ cmd, short, done string }{
		{control.CmdPause, "Stop recording samples and events until resume (the pause is recorded)", "paused"},
		{control.CmdResume, "Record samples and events again after a pause", "resumed"},
		{control.CmdStop, "End the recording as Ctrl-C would: a launched target is stopped, an attached one runs on", "stopping"},
		{control.CmdReset, "Start an aggregated recording's call trees over (record --aggregate): the trace keeps them up to the reset", "reset"},
	} {
		c.AddCommand(&cobra.Command{
			Use:   sc.cmd,
			Short: sc.short,
			Args:  cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				ans, err := ctlCall(session, control.Request{Cmd: sc.cmd}, nil)
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "trueprof: %s %s\n", sc.done, ans.Status.Output)
				return nil
			},
		})
	}
	c.AddCommand(ctlProbeCmds(&session)...)
	return c
}

// ctlProbeCmds are the commands that change what is probed while the
// target runs: trace add, trace remove and root.
func ctlProbeCmds(session *string) []*cobra.Command {
	probe := func(use, short, cmd, done string) *cobra.Command {
		return &cobra.Command{
			Use:   use,
			Short: short,
			Args:  cobra.ExactArgs(1),
			RunE: func(c *cobra.Command, args []string) error {
				ans, err := ctlCall(*session, control.Request{Cmd: cmd, Pattern: args[0]}, nil)
				if err != nil {
					return err
				}
				writeProbeChange(c.ErrOrStderr(), done, ans.Probes)
				return nil
			},
		}
	}
	trace := &cobra.Command{
		Use:   "trace",
		Short: "Probe functions, or remove their probes, while the target runs",
	}
	trace.AddCommand(
		probe("add PATTERN", "Probe the functions matching PATTERN ([MODULE:]GLOB, as --trace) from now on", control.CmdTraceAdd, "probed"),
		probe("remove PATTERN", "Remove the probes of the probed functions matching PATTERN; their open calls end now", control.CmdTraceRemove, "removed"))
	root := probe("root FUNC", "Make FUNC the root function (as --root): the previous root's probes come off, FUNC's callees are probed as they first run",
		control.CmdRoot, "probed")
	return []*cobra.Command{trace, root}
}

// writeProbeChange says what a probe command changed.
func writeProbeChange(w io.Writer, done string, ch *control.ProbeChange) {
	if ch == nil {
		return
	}
	if ch.Removed > 0 {
		fmt.Fprintf(w, "trueprof: removed the previous root's %d functions\n", ch.Removed)
	}
	fmt.Fprintf(w, "trueprof: %s %d functions (%d probe sites)", done, ch.Count, ch.Sites)
	if len(ch.Functions) > 0 {
		fmt.Fprintf(w, ": %s", strings.Join(ch.Functions, ", "))
		if ch.Count > len(ch.Functions) {
			fmt.Fprintf(w, " and %d more", ch.Count-len(ch.Functions))
		}
	}
	fmt.Fprintln(w)
}

// ctlCall sends req to the session named by id (the only one when
// empty).
func ctlCall(id string, req control.Request, file *os.File) (control.Answer, error) {
	dir, err := control.Dir()
	if err != nil {
		return control.Answer{}, err
	}
	s, err := control.Find(dir, id)
	if err != nil {
		return control.Answer{}, err
	}
	ans, err := control.Call(s, req, file)
	if err == nil && ans.Status == nil {
		err = errors.New("the recorder answered without its status")
	}
	return ans, err
}

// writeStatus prints a status for people.
func writeStatus(w io.Writer, st *control.Status) {
	target := strings.Join(st.Target, " ")
	if st.Attached {
		target = "attached"
	}
	fmt.Fprintf(w, "Target:     %s (pid %d)\n", target, st.PID)
	fmt.Fprintf(w, "Trace:      %s, %s written\n", st.Output, formatBytes(st.Bytes))
	fmt.Fprintf(w, "Elapsed:    %v\n", st.ElapsedNS.Round(time.Millisecond))
	fmt.Fprintf(w, "Samples:    %d\n", st.Samples)
	if st.Mech != "" {
		fmt.Fprintf(w, "Events:     %d (%s", st.Events, st.Mech)
		if st.Probes > 0 {
			fmt.Fprintf(w, ", %d probes", st.Probes)
		}
		fmt.Fprintln(w, ")")
	}
	fmt.Fprintf(w, "Lost:       %d\n", st.Lost)
	if st.Aggregated {
		fmt.Fprintf(w, "Trees:      %d nodes (aggregated), %d resets\n", st.TreeNodes, st.Resets)
	}
	state := "recording"
	if st.Paused {
		state = "PAUSED"
	}
	fmt.Fprintf(w, "State:      %s; %d pauses, %v paused, %d samples and events dropped\n",
		state, st.Pauses, st.PausedNS.Round(time.Millisecond), st.Dropped)
}
