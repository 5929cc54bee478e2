package proc

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stackstream/stackstream/pkg/testenv"
	"github.com/stackstream/stackstream/services/agent/internal/workload"
)

// exeMapping starts exe and returns its pid and the executable mapping of
// exe itself, as /proc/PID/maps gives it now.
func exeMapping(t *testing.T, exe string) (int, Mapping) {
	t.Helper()
	p := workload.Start(t, exe, 0)
	// Until the child has called execve, its maps are not exe's.
	deadline := time.Now().Add(30 * time.Second)
	for {
		maps, err := FS{Root: "/proc"}.ReadMaps(p.PID)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range maps {
			if m.Path == exe {
				return p.PID, m
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no mapping of %s in %+v", exe, maps)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestOpenMapped changes a running process's executable after its maps line
// was read, as a hostile process would between the agent's reads: the file
// opened must be the mapped one or none, never what the path leads to now,
// and nothing may block. Each case runs through map_files (the mapped file
// itself) and through the path in the process's root (the fallback).
func TestOpenMapped(t *testing.T) {
	testenv.Root(t)
	fs := FS{Root: "/proc"}
	cases := []struct {
		name string
		// change alters the file system after the maps line m was read;
		// it returns the maps line to use (the stale one, or a fresh one).
		change func(t *testing.T, dir, exe string, pid int, m Mapping) Mapping
		// wantPath is the error through the path (nil: the mapped file).
		wantPath error
		// wantMapFiles is the error through map_files.
		wantMapFiles error
	}{
		{"unchanged", func(t *testing.T, dir, exe string, pid int, m Mapping) Mapping { return m }, nil, nil},
		{"renamed over by another file", func(t *testing.T, dir, exe string, pid int, m Mapping) Mapping {
			other := workload.BuildC(t, t.TempDir(), "other", false)
			if err := os.Rename(other, exe); err != nil {
				t.Fatal(err)
			}
			return m
		}, ErrNotMapped, nil},
		{"final symlink", func(t *testing.T, dir, exe string, pid int, m Mapping) Mapping {
			other := workload.BuildC(t, t.TempDir(), "other", false)
			link := exe + ".link"
			if err := os.Symlink(other, link); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(link, exe); err != nil {
				t.Fatal(err)
			}
			// O_PATH|O_NOFOLLOW opens the link itself, which is no regular file.
			return m
		}, ErrNotRegular, nil},
		{"symlinked directory", func(t *testing.T, dir, exe string, pid int, m Mapping) Mapping {
			// The directory the maps line names now leads elsewhere, to a
			// file of the same name.
			bin := filepath.Dir(exe)
			elsewhere := t.TempDir()
			workload.BuildC(t, elsewhere, filepath.Base(exe), false)
			if err := os.Rename(bin, bin+".old"); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(elsewhere, bin); err != nil {
				t.Fatal(err)
			}
			m.Path = exe // what a maps line read before the swap said
			return m
		}, syscall.ELOOP, nil},
		{"fifo in its place", func(t *testing.T, dir, exe string, pid int, m Mapping) Mapping {
			fifo := filepath.Join(dir, "fifo")
			if err := unix.Mkfifo(fifo, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(fifo, exe); err != nil {
				t.Fatal(err)
			}
			// Opening it for reading would wait for a writer forever.
			return m
		}, ErrNotRegular, nil},
		{"deleted, fifo named like it", func(t *testing.T, dir, exe string, pid int, m Mapping) Mapping {
			if err := os.Remove(exe); err != nil {
				t.Fatal(err)
			}
			if err := unix.Mkfifo(exe+deletedSuffix, 0o644); err != nil {
				t.Fatal(err)
			}
			maps, err := fs.ReadMaps(pid)
			if err != nil {
				t.Fatal(err)
			}
			for _, fresh := range maps {
				if fresh.Start == m.Start {
					if fresh.Path != exe+deletedSuffix {
						t.Fatalf("maps says %q, want %q", fresh.Path, exe+deletedSuffix)
					}
					return fresh
				}
			}
			t.Fatal("mapping gone")
			return m
		}, ErrDeleted, nil},
	}
	for _, c := range cases {
		for _, mapFiles := range []bool{true, false} {
			name := c.name + "/path"
			want := c.wantPath
			if mapFiles {
				name, want = c.name+"/map_files", c.wantMapFiles
			}
			t.Run(name, func(t *testing.T) {
				dir := t.TempDir()
				bin := filepath.Join(dir, "bin")
				if err := os.Mkdir(bin, 0o755); err != nil {
					t.Fatal(err)
				}
				exe := workload.BuildC(t, bin, "mapped", false)
				pid, m := exeMapping(t, exe)
				mappedInode := m.Inode
				m = c.change(t, dir, exe, pid, m)
				id, statErr := fs.StatMapped(pid, m, mapFiles)
				f, err := fs.OpenMapped(pid, m, mapFiles)
				if want != nil {
					if !errors.Is(err, want) {
						t.Fatalf("OpenMapped = %v, want %v", err, want)
					}
					if !errors.Is(statErr, want) {
						t.Fatalf("StatMapped = %v, want %v", statErr, want)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				if statErr != nil || id != f.ID {
					t.Fatalf("StatMapped = %+v, %v; OpenMapped found %+v", id, statErr, f.ID)
				}
				if f.ID.Inode != mappedInode {
					t.Fatalf("opened inode %d, the mapping's is %d", f.ID.Inode, mappedInode)
				}
				r, err := f.Open()
				if err != nil {
					t.Fatal(err)
				}
				defer r.Close()
				st, err := r.Stat()
				if err != nil {
					t.Fatal(err)
				}
				if got := st.Sys().(*syscall.Stat_t).Ino; got != mappedInode || st.Size() != f.ID.Size {
					t.Fatalf("read inode %d of %d bytes, checked inode %d of %d", got, st.Size(), mappedInode, f.ID.Size)
				}
			})
		}
	}
}
