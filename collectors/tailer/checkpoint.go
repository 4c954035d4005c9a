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
	if n <= 0 {
		return 0, nil
	}
	buf := make([]byte, n)
	if _, err := f.ReadAt(buf, 0); err != nil {
		return 0, err
	}
	return crc32.ChecksumIEEE(buf), nil
}
