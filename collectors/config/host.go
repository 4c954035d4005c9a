package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ccab-dev/ccab/collectors/metrics"
	"github.com/ccab-dev/ccab/collectors/record"
	"github.com/ccab-dev/ccab/internal/netns"
)

// RolloutState is the rollout agent's state file.
type RolloutState struct {
	RolloutID  string `json:"rollout_id"`
	Arm        string `json:"arm"`
	CC         string `json:"cc"`
	Generation int64  `json:"generation"`
}

// Host stamps records: pop, host, kernel from the configuration (or the OS), arm and
// rollout_id from the rollout agent's state file, and cc (the host's default congestion
// control) from procfs — read inside CCNetns when the host is a network namespace (net sysctls
// belong to the reading thread's namespace). The state file and cc are checked at most every RefreshEvery; the
// file is read again only when its mtime or size changed. A missing or unreadable state
// file gives empty arm and rollout_id, ccab_collector_rollout_state_ok 0, and a count in
// ccab_collector_rollout_state_errors_total{reason}.
type Host struct {
	RefreshEvery time.Duration

	mu        sync.Mutex
	base      record.Meta
	procfs    string
	ccNetns   string // netns.Path of the namespace whose cc is the host's ("" = own)
	statePath string
	m         *metrics.Metrics
	log       *slog.Logger
	checked   time.Time
	mtime     time.Time
	size      int64
	stateErr  string
	state     RolloutState
}

// NewHost fills c.Host and c.Kernel from the OS when they are empty.
func NewHost(c *Config, m *metrics.Metrics, log *slog.Logger) (*Host, error) {
	if c.Host == "" {
		h, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("host name: %w (set --host)", err)
		}
		c.Host = h
	}
	if c.Kernel == "" {
		c.Kernel = kernelRelease(c.ProcFS)
	}
	h := &Host{RefreshEvery: time.Second, procfs: c.ProcFS, ccNetns: netns.Path(c.CCNetns), statePath: c.RolloutStateFile, m: m, log: log,
		base: record.Meta{Pop: c.Pop, Host: c.Host, Kernel: c.Kernel, SampleRate: c.SampleRate}}
	h.refresh(time.Now(), true)
	return h, nil
}

func kernelRelease(procfs string) string {
	if b, err := os.ReadFile(filepath.Join(procfs, "sys/kernel/osrelease")); err == nil {
		return strings.TrimSpace(string(b))
	}
	var u syscall.Utsname
	if err := syscall.Uname(&u); err != nil {
		return ""
	}
	var sb strings.Builder
	for _, c := range u.Release {
		if c == 0 {
			break
		}
		sb.WriteByte(byte(c))
	}
	return sb.String()
}

// Meta returns the current stamp (TsMs is left 0 for the caller to set).
func (h *Host) Meta() record.Meta {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := time.Now()
	if now.Sub(h.checked) >= h.RefreshEvery {
		h.refresh(now, false)
	}
	m := h.base
	m.Arm, m.RolloutID = h.state.Arm, h.state.RolloutID
	return m
}

// refresh re-reads cc and, if it changed, the state file. Lock held (or not yet shared).
func (h *Host) refresh(now time.Time, first bool) {
	h.checked = now
	var ccText []byte
	err := netns.Do(h.ccNetns, func() (err error) {
		ccText, err = os.ReadFile(filepath.Join(h.procfs, "sys/net/ipv4/tcp_congestion_control"))
		return err
	})
	if err == nil {
		h.base.CC = strings.TrimSpace(string(ccText))
	} else if first {
		h.log.Warn("host congestion control unreadable", "netns", h.ccNetns, "err", err)
	}
	fi, err := os.Stat(h.statePath)
	if err != nil {
		reason := "unreadable"
		if errors.Is(err, os.ErrNotExist) {
			reason = "missing"
		}
		h.fail(reason, err, first)
		return
	}
	if !first && h.stateErr == "" && fi.ModTime().Equal(h.mtime) && fi.Size() == h.size {
		return
	}
	b, err := os.ReadFile(h.statePath)
	if err != nil {
		h.fail("unreadable", err, first)
		return
	}
	var st RolloutState
	if err := json.Unmarshal(b, &st); err != nil {
		h.fail("bad_json", err, first)
		return
	}
	h.mtime, h.size = fi.ModTime(), fi.Size()
	if h.stateErr != "" || st != h.state || first {
		h.log.Info("rollout state", "file", h.statePath, "rollout_id", st.RolloutID, "arm", st.Arm,
			"cc", st.CC, "generation", st.Generation)
	}
	h.state, h.stateErr = st, ""
	h.m.RolloutStateOK.Set(1)
	h.m.RolloutGeneration.Set(float64(st.Generation))
}

func (h *Host) fail(reason string, err error, first bool) {
	h.m.RolloutStateErrors.WithLabelValues(reason).Inc()
	h.m.RolloutStateOK.Set(0)
	if h.stateErr != reason || first {
		h.log.Warn("rollout state unavailable: arm and rollout_id are empty", "file", h.statePath,
			"reason", reason, "err", err)
	}
	h.state, h.stateErr = RolloutState{}, reason
	h.mtime, h.size = time.Time{}, -1
}
