package tailer

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"time"

	"github.com/ccab-dev/ccab/internal/atomicfile"
)

const checkpointVersion = 1

// fpMax is how many leading bytes of a file its fingerprint covers.
const fpMax = 512

// tailMax is how many bytes just before the read offset the tail fingerprint covers: the
// content that must still be there if the file was not truncated and rewritten.
const tailMax = 256

// Checkpoint is the tailer's state file. Offsets are those whose every line was durably
// delivered (Kafka acknowledged it, or the spool fsynced it); a restart resumes there.
type Checkpoint struct {
	Version   int         `json:"version"`
	WrittenMs int64       `json:"written_ms"`
	SafeMs    int64       `json:"safe_ms"` // the sink's SafeMs, read before the offsets
	Clean     bool        `json:"clean"`   // written at a shutdown with nothing in flight
	Files     []FileState `json:"files"`
}

// FileState is one followed file. A file is known by device and inode, so a renamed file
// keeps its state; Gen counts truncations (copytruncate) of the same inode.
type FileState struct {
	Dev    uint64 `json:"dev"`
	Ino    uint64 `json:"ino"`
	Gen    int64  `json:"gen"`
	Offset int64  `json:"offset"`
	Path   string `json:"path"`
	FpLen  int64  `json:"fp_len"` // leading bytes covered by Fp
	Fp     uint32 `json:"fp"`     // CRC-32 of them: tells a reused inode from the same file
	// TailLen bytes just before Offset and their CRC-32: tells a file truncated and written
	// again past Offset (copytruncate) from the one checkpointed, even when its head is the same.
	TailLen int64  `json:"tail_len,omitempty"`
	TailFp  uint32 `json:"tail_fp,omitempty"`
	// SeenMs: when Path last named this file (0 once it was rotated away). After a restart,
	// rotation siblings of Path written since then are files that lived and were rotated
	// away while the collector was stopped.
	SeenMs int64 `json:"seen_ms,omitempty"`
	// Closed: a rotated file read to its end and closed. Kept (a bounded number) so that a
	// late write to it, or finding it again under another name, resumes at Offset.
	Closed bool `json:"closed,omitempty"`
}

func loadCheckpoint(path string) (Checkpoint, bool, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return Checkpoint{Version: checkpointVersion, Clean: true}, false, nil
	}
	if err != nil {
		return Checkpoint{}, false, fmt.Errorf("tailer: read checkpoint %s: %w", path, err)
	}
	var c Checkpoint
	if err := json.Unmarshal(b, &c); err != nil {
		return Checkpoint{}, false, fmt.Errorf("tailer: checkpoint %s: %w", path, err)
	}
	if c.Version != checkpointVersion {
		return Checkpoint{}, false, fmt.Errorf("tailer: checkpoint %s has version %d, want %d", path, c.Version, checkpointVersion)
	}
	return c, true, nil
}

func saveCheckpoint(path string, c Checkpoint) error {
	c.Version = checkpointVersion
	c.WrittenMs = time.Now().UnixMilli()
	b, err := json.MarshalIndent(c, "", " ")
	if err != nil {
		return fmt.Errorf("tailer: encode checkpoint: %w", err)
	}
	if err := atomicfile.WriteFile(path, b, 0o640); err != nil {
		return fmt.Errorf("tailer: checkpoint: %w", err)
	}
	return nil
}

// fingerprint is the CRC-32 of the first n bytes of f (n ≤ fpMax).
func fingerprint(f io.ReaderAt, n int64) (uint32, error) {
	return rangeFp(f, 0, n)
}

// tailFingerprint is the length and CRC-32 of the (up to tailMax) bytes just before off.
func tailFingerprint(f io.ReaderAt, off int64) (int64, uint32, error) {
	n := min(off, tailMax)
	fp, err := rangeFp(f, off-n, n)
	return n, fp, err
}

func rangeFp(f io.ReaderAt, from, n int64) (uint32, error) {
	if n <= 0 {
		return 0, nil
	}
	buf := make([]byte, n)
	if _, err := f.ReadAt(buf, from); err != nil {
		return 0, err
	}
	return crc32.ChecksumIEEE(buf), nil
}
