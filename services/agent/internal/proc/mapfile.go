package proc

import (
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Errors of OpenMapped, checked with errors.Is.
var (
	// ErrNotRegular: what is there is a FIFO, socket, device or directory.
	ErrNotRegular = errors.New("not a regular file")
	// ErrNotMapped: the file found is not the one the mapping named (another
	// device or inode): it was replaced since the maps line was read.
	ErrNotMapped = errors.New("not the mapped file")
	// ErrDeleted: the mapped file has no name any more and map_files is not
	// available to reach it.
	ErrDeleted = errors.New("mapped file deleted")
)

// deletedSuffix is what the kernel appends to the path of an unlinked file
// in /proc/PID/maps.
const deletedSuffix = " (deleted)"

// FileID identifies the content of a file: device and inode say which file,
// size, mtime and ctime change when it is rewritten in place (an inode number
// can also be reused by a new file once the old one is gone).
type FileID struct {
	Dev   uint64
	Inode uint64
	Size  int64
	Mtime int64 // ns
	Ctime int64 // ns
}

func fileIDOf(st *unix.Stat_t) FileID {
	return FileID{Dev: st.Dev, Inode: st.Ino, Size: st.Size, Mtime: st.Mtim.Nano(), Ctime: st.Ctim.Nano()}
}

// MappedFile is the checked file of a mapping, held by an O_PATH descriptor:
// it pins the inode without having opened it for reading, so nothing the
// file's owner controls (a FIFO's writer, a device driver's open) ran yet.
type MappedFile struct {
	ID  FileID
	fd  int
	via string
}

// Close releases the descriptor.
func (f *MappedFile) Close() error {
	if err := unix.Close(f.fd); err != nil {
		return fmt.Errorf("close %s: %w", f.via, err)
	}
	return nil
}

// Open opens the checked file for reading, through this process's own
// descriptor table, so the inode read is the one checked; the new
// descriptor is checked again.
func (f *MappedFile) Open() (*os.File, error) {
	// /proc/self/fd/N reopens the very file the O_PATH descriptor holds.
	fd, err := unix.Open("/proc/self/fd/"+strconv.Itoa(f.fd), unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("reopen %s: %w", f.via, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("stat %s: %w", f.via, err)
	}
	if st.Dev != f.ID.Dev || st.Ino != f.ID.Inode {
		unix.Close(fd)
		return nil, fmt.Errorf("reopen %s: %w", f.via, ErrNotMapped)
	}
	return os.NewFile(uintptr(fd), f.via), nil
}

// OpenMapped finds the file of mapping m of pid without following links the
// process controls and without blocking, and checks it is a regular file
// with the device and inode the maps line gave. It prefers
// /proc/PID/map_files/START-END, the mapped file itself even when deleted or
// in another mount namespace (it needs CAP_SYS_ADMIN or
// CAP_CHECKPOINT_RESTORE); without it, it resolves m.Path inside the
// process's root with openat2, refusing every symlink on the way
// (RESOLVE_IN_ROOT|RESOLVE_NO_SYMLINKS). useMapFiles false skips map_files
// (tests of the fallback).
func (fs FS) OpenMapped(pid int, m Mapping, useMapFiles bool) (*MappedFile, error) {
	var fd int
	var via string
	var err error
	if useMapFiles {
		via = fs.mapFilesPath(pid, m)
		// The last component is a kernel-made link to the mapping's file, not
		// one the process wrote; O_PATH opens nothing for reading.
		fd, err = unix.Open(via, unix.O_PATH|unix.O_CLOEXEC, 0)
	}
	if !useMapFiles || err != nil {
		fd, via, err = fs.openInRoot(pid, m)
		if err != nil {
			return nil, err
		}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("stat %s: %w", via, err)
	}
	if err := check(&st, m, via, func(sfs *unix.Statfs_t) error { return unix.Fstatfs(fd, sfs) }); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return &MappedFile{ID: fileIDOf(&st), fd: fd, via: via}, nil
}

// StatMapped returns the FileID of the file of mapping m of pid, checked as
// OpenMapped checks it, without keeping it open: through map_files it is a
// single stat (the agent calls it for every mapping of every new process).
func (fs FS) StatMapped(pid int, m Mapping, useMapFiles bool) (FileID, error) {
	if useMapFiles {
		via := fs.mapFilesPath(pid, m)
		var st unix.Stat_t
		// stat follows only the kernel's link to the mapped file, and opens
		// nothing.
		if err := unix.Stat(via, &st); err == nil {
			if err := check(&st, m, via, func(sfs *unix.Statfs_t) error { return unix.Statfs(via, sfs) }); err != nil {
				return FileID{}, err
			}
			return fileIDOf(&st), nil
		}
	}
	f, err := fs.OpenMapped(pid, m, useMapFiles)
	if err != nil {
		return FileID{}, err
	}
	defer f.Close()
	return f.ID, nil
}

func (fs FS) mapFilesPath(pid int, m Mapping) string {
	return filepath.Join(fs.Root, strconv.Itoa(pid), "map_files", fmt.Sprintf("%x-%x", m.Start, m.Limit))
}

// check says whether st is a regular file and the one the maps line named.
func check(st *unix.Stat_t, m Mapping, via string, statfs func(*unix.Statfs_t) error) error {
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fmt.Errorf("open %s: %w (mode %#o)", via, ErrNotRegular, st.Mode&unix.S_IFMT)
	}
	if !sameFile(st, m, statfs) {
		return fmt.Errorf("open %s: %w: found %d:%d inode %d, maps said %s inode %d",
			via, ErrNotMapped, unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino, m.Dev, m.Inode)
	}
	return nil
}

// openInRoot opens m.Path as seen by pid: inside its root directory, with no
// symlink followed, O_PATH.
func (fs FS) openInRoot(pid int, m Mapping) (int, string, error) {
	via := filepath.Join(fs.Root, strconv.Itoa(pid), "root") + m.Path
	if strings.HasSuffix(m.Path, deletedSuffix) {
		// What has that name now is not the mapped file (it may be a FIFO
		// put there to block whoever opens it).
		return -1, via, fmt.Errorf("open %s: %w", via, ErrDeleted)
	}
	fd, err := fs.openPathInRoot(pid, m.Path)
	return fd, via, err
}

// openPathInRoot opens path as seen by pid, O_PATH, refusing every symlink
// on the way and staying inside the process's root.
func (fs FS) openPathInRoot(pid int, path string) (int, error) {
	via := filepath.Join(fs.Root, strconv.Itoa(pid), "root") + path
	root, err := unix.Open(filepath.Join(fs.Root, strconv.Itoa(pid), "root"), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open root of pid %d: %w", pid, err)
	}
	defer unix.Close(root)
	fd, err := unix.Openat2(root, strings.TrimPrefix(path, "/"), &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return -1, fmt.Errorf("open %s: %w", via, err)
	}
	return fd, nil
}

// sameFile reports whether the file fd describes is the one the maps line
// named. Kernels before 6.x print the device of an overlayfs file's backing
// file in maps, while fstat gives the overlay's: there the inode must match
// and the file must be on an overlay.
func sameFile(st *unix.Stat_t, m Mapping, statfs func(*unix.Statfs_t) error) bool {
	if st.Ino != m.Inode {
		return false
	}
	if dev, ok := parseDev(m.Dev); ok && dev == st.Dev {
		return true
	}
	var sfs unix.Statfs_t
	return statfs(&sfs) == nil && sfs.Type == unix.OVERLAYFS_SUPER_MAGIC
}

// parseDev reads the "major:minor" (hex) of a maps line.
func parseDev(s string) (uint64, bool) {
	maj, min, ok := strings.Cut(s, ":")
	if !ok {
		return 0, false
	}
	a, err1 := strconv.ParseUint(maj, 16, 32)
	b, err2 := strconv.ParseUint(min, 16, 32)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return unix.Mkdev(uint32(a), uint32(b)), true
}

// LoadBias is what to add to an ELF virtual address of the file mapped by m
// (loads: its PT_LOAD headers): false when m's offset is in none of them.
func LoadBias(loads []elf.ProgHeader, m Mapping) (uint64, bool) {
	for _, p := range loads {
		if p.Off <= m.Offset && m.Offset < p.Off+p.Filesz {
			return m.Start - (m.Offset - p.Off + p.Vaddr), true
		}
	}
	return 0, false
}
