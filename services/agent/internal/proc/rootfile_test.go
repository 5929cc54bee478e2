package proc

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stackstream/stackstream/pkg/testenv"
)

// TestOpenInRoot: the file a process wrote is read through its root; a
// symlink, a FIFO (no blocking), a directory, and a file of another user
// (a hard link to a secret) are refused.
func TestOpenInRoot(t *testing.T) {
	testenv.Root(t)
	const nobody = 65534
	cmd := exec.Command("sleep", "60")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	pid := cmd.Process.Pid
	fs := FS{Root: "/proc"}
	st, err := fs.ReadStatus(pid)
	if err != nil {
		t.Fatal(err)
	}
	if st.UIDs[1] != nobody || st.NSPid != pid || st.Catches(unix.SIGQUIT) {
		t.Fatalf("status %+v", st)
	}
	dir, err := os.MkdirTemp("/tmp", "rootfile-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	own := filepath.Join(dir, "own.map")
	os.WriteFile(own, []byte("1000 10 f\n"), 0o644)
	os.Chown(own, nobody, nobody)
	root := filepath.Join(dir, "root.map")
	os.WriteFile(root, []byte("secret\n"), 0o600)
	os.Symlink(own, filepath.Join(dir, "link.map"))
	unix.Mkfifo(filepath.Join(dir, "fifo.map"), 0o666)
	os.Chown(filepath.Join(dir, "fifo.map"), nobody, nobody)
	os.Mkdir(filepath.Join(dir, "dir.map"), 0o755)
	os.Symlink(dir, dir+"-linkdir")
	defer os.Remove(dir + "-linkdir")

	for _, c := range []struct {
		name string
		path string
		want error // nil: opens
	}{
		{"own file", own, nil},
		{"other user's file", root, ErrNotOwned},
		{"symlink", filepath.Join(dir, "link.map"), ErrNotRegular}, // O_PATH|O_NOFOLLOW holds the link itself
		{"symlinked directory", filepath.Join(dir+"-linkdir", "own.map"), unix.ELOOP},
		{"fifo", filepath.Join(dir, "fifo.map"), ErrNotRegular},
		{"directory", filepath.Join(dir, "dir.map"), ErrNotRegular},
		{"missing", filepath.Join(dir, "none.map"), os.ErrNotExist},
	} {
		t.Run(c.name, func(t *testing.T) {
			done := make(chan error, 1)
			go func() {
				f, err := fs.OpenInRoot(pid, c.path, st)
				if err == nil {
					f.Close()
				}
				done <- err
			}()
			select {
			case err := <-done:
				if (c.want == nil) != (err == nil) || (c.want != nil && !errors.Is(err, c.want)) {
					t.Fatalf("err %v, want %v", err, c.want)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("blocked")
			}
		})
	}
}

func TestParseStatus(t *testing.T) {
	in := "Name:\tjava\nNSpid:\t4242\t7\nUid:\t1000\t1001\t1002\t1003\nGid:\t10\t11\t12\t13\nSigCgt:\t0000000181005ccf\n"
	st, err := ParseStatus(4242, in)
	if err != nil {
		t.Fatal(err)
	}
	if st.NSPid != 7 || st.UIDs != [4]uint32{1000, 1001, 1002, 1003} || st.GIDs[1] != 11 || !st.Catches(unix.SIGQUIT) || st.Catches(unix.SIGUSR1) {
		t.Fatalf("%+v", st)
	}
	for _, bad := range []string{"Uid:\t1\t2\n", "NSpid:\t\nUid:\t1 1 1 1\nGid:\t1 1 1 1\n", "Uid:\t1 1 1 1\nGid:\t1 1 1 1\nSigCgt:\tzz\n"} {
		if _, err := ParseStatus(1, bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
	if st, err := ParseStatus(9, "Uid:\t1 1 1 1\nGid:\t1 1 1 1\n"); err != nil || st.NSPid != 9 {
		t.Errorf("without NSpid: %+v %v", st, err)
	}
}
