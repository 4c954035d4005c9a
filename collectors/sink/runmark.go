package sink

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/ccab-dev/ccab/internal/atomicfile"
)

// runMarkFile, in the spool directory, says whether the last process that used the spool
// shut its sink down (records delivered or spooled, the spool closed) and how many
// processes before it did not. A start that finds "running": true knows the previous
// process died with the sink's memory in it (SIGKILL, a crash, an OOM kill, a power loss):
// the records it held only in memory are lost and nothing counted them.
const runMarkFile = "run.json"

// RunMark is the content of runMarkFile.
type RunMark struct {
	Running      bool  `json:"running"`       // a process uses the spool, or died using it
	Pid          int   `json:"pid"`           // of that process
	StartedMs    int64 `json:"started_ms"`    // when it started (unix ms)
	StoppedMs    int64 `json:"stopped_ms"`    // when it shut down (0 while running)
	UncleanStops int64 `json:"unclean_stops"` // processes of this spool that died running, found at their next start
}

// startRun reads the spool's run mark and writes the mark of this process (running, with
// the unclean stops counted so far). It returns the previous mark and whether the previous
// process died without shutting down. A missing mark is a first start (or a spool from a
// version without it): clean.
func startRun(dir string, pid int, nowMs int64) (prev RunMark, unclean bool, cur RunMark, err error) {
	path := filepath.Join(dir, runMarkFile)
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return prev, false, cur, fmt.Errorf("sink: read %s: %w", path, err)
	default:
		if jerr := json.Unmarshal(b, &prev); jerr != nil {
			// A torn mark can only come from a crash while writing it: count it as one.
			prev, unclean = RunMark{Running: true}, true
		}
	}
	unclean = unclean || prev.Running
	cur = RunMark{Running: true, Pid: pid, StartedMs: nowMs, UncleanStops: prev.UncleanStops}
	if unclean {
		cur.UncleanStops++
	}
	return prev, unclean, cur, writeRunMark(dir, cur)
}

// stopRun records that this process shut its sink down.
func stopRun(dir string, cur RunMark, nowMs int64) error {
	cur.Running, cur.StoppedMs = false, nowMs
	return writeRunMark(dir, cur)
}

func writeRunMark(dir string, mk RunMark) error {
	b, err := json.Marshal(mk)
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(filepath.Join(dir, runMarkFile), append(b, '\n'), 0o640); err != nil {
		return fmt.Errorf("sink: write %s: %w", runMarkFile, err)
	}
	return nil
}
