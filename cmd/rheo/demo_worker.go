package main

import (
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/rheo-go/rheo"
)

// hangLimit bounds how long a fetch-and-hang worker waits to be killed, so
// that a demo that died itself leaves no process behind for long.
const hangLimit = time.Minute

// demoWorkerCommand is the worker process the demo starts by re-executing
// this binary. It is hidden: its output is a protocol, not a user interface.
//
// Modes:
//
//	fetch-and-hang  lease one event, print the lease as JSON, wait to be killed
//	fetch-and-ack   lease up to --limit events, ack them, print {"leases", "acked"}
//	ack             read a lease (JSON) on stdin, ack it, print {"result"}
func (a *app) demoWorkerCommand() *cobra.Command {
	var (
		stream, group, mode, consumer, fault string
		lease                                time.Duration
		limit                                int
	)
	cmd := &cobra.Command{
		Use:    "demo-worker",
		Short:  "A worker process of the crash demo",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: action(func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			c, err := a.client(ctx, rheo.WithLeaseDuration(lease))
			if err != nil {
				return err
			}
			defer c.Close()
			enc := json.NewEncoder(a.stdout)
			switch mode {
			case "fetch-and-hang":
				ls, err := c.Fetch(ctx, stream, group, rheo.FetchOptions{Limit: 1, ConsumerID: consumer, LeaseDuration: lease})
				if err != nil {
					return err
				}
				if len(ls) != 1 {
					return fmt.Errorf("fetched %d leases, want 1", len(ls))
				}
				if err := enc.Encode(toLeaseJSON(ls[0])); err != nil {
					return err
				}
				// Hold the lease without renewing it until killed.
				t := time.NewTimer(hangLimit)
				defer t.Stop()
				select {
				case <-ctx.Done():
				case <-t.C:
				}
				return fmt.Errorf("worker %s was not killed within %v", consumer, hangLimit)
			case "fetch-and-ack":
				ls, err := c.Fetch(ctx, stream, group, rheo.FetchOptions{Limit: limit, ConsumerID: consumer, LeaseDuration: lease})
				if err != nil {
					return enc.Encode(workerBReport{Leases: []leaseJSON{}, Error: err.Error()})
				}
				rep := workerBReport{Leases: make([]leaseJSON, len(ls))}
				for i, l := range ls {
					rep.Leases[i] = toLeaseJSON(l)
				}
				switch {
				case fault == faultSkipAck:
					// A lost ack: the worker believes it acked.
					rep.Acked = len(ls)
				default:
					if err := c.AckBatch(ctx, ls); err != nil {
						rep.Error = err.Error()
					} else {
						rep.Acked = len(ls)
					}
				}
				return enc.Encode(rep)
			case "ack":
				in, err := io.ReadAll(a.stdin)
				if err != nil {
					return err
				}
				var lj leaseJSON
				if err := json.Unmarshal(in, &lj); err != nil {
					return fmt.Errorf("stdin is not a lease: %w", err)
				}
				err = c.Ack(ctx, lj.lease())
				res := map[string]string{"result": errCode(err)}
				if err != nil {
					res["error"] = err.Error()
				}
				return enc.Encode(res)
			}
			return usagef("demo-worker: unknown mode %q", mode)
		}),
	}
	fs := cmd.Flags()
	fs.StringVar(&stream, "stream", demoStream, "stream")
	fs.StringVar(&group, "group", demoGroup, "group")
	fs.StringVar(&mode, "mode", "", "fetch-and-hang, fetch-and-ack or ack")
	fs.StringVar(&consumer, "consumer", "worker", "consumer ID")
	fs.DurationVar(&lease, "lease", demoLease, "lease duration")
	fs.IntVar(&limit, "limit", 100, "most events to fetch (fetch-and-ack)")
	fs.StringVar(&fault, "fault", "", "inject a fault (skip-ack)")
	return cmd
}
