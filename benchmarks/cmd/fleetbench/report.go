package main

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
)

// parseCPU returns used_cpu_sys + used_cpu_user of an INFO reply, in µs.
func parseCPU(info string) (int64, error) {
	var us int64
	found := 0
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		if !ok || (k != "used_cpu_sys" && k != "used_cpu_user") {
			continue
		}
		x, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return 0, fmt.Errorf("INFO %s: %v", k, err)
		}
		us += int64(x*1e6 + 0.5)
		found++
	}
	if found != 2 {
		return 0, fmt.Errorf("INFO cpu: used_cpu_sys and used_cpu_user not both found")
	}
	return us, nil
}

// procRow is one worker's line of the table.
type procRow struct {
	ID                                int
	Calls, Errors                     int64
	PerSec, TripsPerCall, CmdsPerCall float64
	ClientMicrosPerCall               float64
}

// nodeRow is one Redis node's line.
type nodeRow struct {
	Addr          string
	Scopes        int // scopes whose hash tag it holds
	CPUMicros     int64
	Busy          float64 // CPU seconds per second of the run
	MicrosPerCall float64 // its CPU over every call of the fleet
	Share         float64 // of the fleet's calls decided on it; -1: not known
	MicrosPerOwn  float64 // its CPU over the calls it decided; 0 when Share is unknown or 0
}

// summary is the whole table.
type summary struct {
	Procs []procRow
	Total procRow // ID 0
	Nodes []nodeRow
	// RedisMicrosPerCall is the CPU of every node over every call.
	RedisMicrosPerCall float64
}

// summarize computes the table from the workers' reports, each node's CPU
// (µs) over the run, the run's wall time in seconds (for Busy), and
// scopeNode, the node index of every scope (nil without scopes: then a
// single node has Share 1 and several have it unknown).
func summarize(reps []workerReport, addrs []string, nodeCPU []int64, wall float64, scopeNode []int) summary {
	var s summary
	var trips, cmds, cpu int64
	var scopeCalls []int64
	for _, r := range reps {
		row := procRow{ID: r.ID, Calls: r.Calls, Errors: r.Errors}
		if r.Seconds > 0 {
			row.PerSec = float64(r.Calls) / r.Seconds
		}
		if r.Calls > 0 {
			row.TripsPerCall = float64(r.Trips) / float64(r.Calls)
			row.CmdsPerCall = float64(r.Cmds) / float64(r.Calls)
			row.ClientMicrosPerCall = float64(r.CPUMicros) / float64(r.Calls)
		}
		s.Procs = append(s.Procs, row)
		s.Total.Calls += r.Calls
		s.Total.Errors += r.Errors
		s.Total.PerSec += row.PerSec
		trips += r.Trips
		cmds += r.Cmds
		cpu += r.CPUMicros
		for i, n := range r.ScopeCalls {
			for len(scopeCalls) <= i {
				scopeCalls = append(scopeCalls, 0)
			}
			scopeCalls[i] += n
		}
	}
	calls := float64(s.Total.Calls)
	if calls > 0 {
		s.Total.TripsPerCall = float64(trips) / calls
		s.Total.CmdsPerCall = float64(cmds) / calls
		s.Total.ClientMicrosPerCall = float64(cpu) / calls
	}
	nodeCalls := make([]int64, len(addrs))
	known := len(addrs) == 1
	if scopeNode != nil && len(scopeCalls) > 0 {
		known = true
		for i, n := range scopeCalls {
			nodeCalls[scopeNode[i]] += n
		}
	} else if known {
		nodeCalls[0] = s.Total.Calls
	}
	var all int64
	for i, a := range addrs {
		row := nodeRow{Addr: a, CPUMicros: nodeCPU[i], Share: -1}
		for _, n := range scopeNode {
			if n == i {
				row.Scopes++
			}
		}
		all += nodeCPU[i]
		if wall > 0 {
			row.Busy = float64(nodeCPU[i]) / 1e6 / wall
		}
		if calls > 0 {
			row.MicrosPerCall = float64(nodeCPU[i]) / calls
			if known {
				row.Share = float64(nodeCalls[i]) / calls
			}
		}
		if known && nodeCalls[i] > 0 {
			row.MicrosPerOwn = float64(nodeCPU[i]) / float64(nodeCalls[i])
		}
		s.Nodes = append(s.Nodes, row)
	}
	if calls > 0 {
		s.RedisMicrosPerCall = float64(all) / calls
	}
	return s
}

// write prints s as two small tables.
func (s summary) write(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "proc\tcalls\tcalls/s\ttrips/call\tcmds/call\tclient-µs/call\terrors\t")
	line := func(name string, r procRow) {
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%.3f\t%.2f\t%.1f\t%d\t\n", name, r.Calls, r.PerSec, r.TripsPerCall, r.CmdsPerCall, r.ClientMicrosPerCall, r.Errors)
	}
	for _, r := range s.Procs {
		line(strconv.Itoa(r.ID), r)
	}
	line("total", s.Total)
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "redis node\tscopes\tcpu-s\tbusy\tshare of calls\tµs/call (all)\tµs/call (its own)\t")
	for _, n := range s.Nodes {
		share, own := "?", "?"
		if n.Share >= 0 {
			share = fmt.Sprintf("%.1f%%", 100*n.Share)
		}
		if n.MicrosPerOwn > 0 {
			own = fmt.Sprintf("%.1f", n.MicrosPerOwn)
		}
		fmt.Fprintf(tw, "%s\t%d\t%.2f\t%.2f\t%s\t%.1f\t%s\t\n", n.Addr, n.Scopes, float64(n.CPUMicros)/1e6, n.Busy, share, n.MicrosPerCall, own)
	}
	var cpu int64
	var busy float64
	scopes := 0
	for _, n := range s.Nodes {
		scopes += n.Scopes
		cpu += n.CPUMicros
		busy += n.Busy
	}
	fmt.Fprintf(tw, "all\t%d\t%.2f\t%.2f\t100%%\t%.1f\t\t\n", scopes, float64(cpu)/1e6, busy, s.RedisMicrosPerCall)
	tw.Flush()
}
