package proc

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseCgroup(t *testing.T) {
	tests := []struct {
		name    string
		content string
		want    Cgroup
	}{
		{"v2 service", "0::/system.slice/opensearch.service\n",
			Cgroup{Path: "/system.slice/opensearch.service", SystemdUnit: "opensearch.service"}},
		{"v1 named systemd hierarchy wins", "4:memory:/process_api/78c6\n1:name=systemd:/system.slice/kafka.service\n0::/\n",
			Cgroup{Path: "/system.slice/kafka.service", SystemdUnit: "kafka.service"}},
		{"child cgroup of a unit", "0::/system.slice/nginx.service/worker\n",
			Cgroup{Path: "/system.slice/nginx.service/worker", SystemdUnit: "nginx.service"}},
		{"user session scope", "0::/user.slice/user-1000.slice/session-3.scope\n",
			Cgroup{Path: "/user.slice/user-1000.slice/session-3.scope", SystemdUnit: "session-3.scope"}},
		{"docker", "0::/system.slice/docker-" + strings.Repeat("ab", 32) + ".scope\n",
			Cgroup{Path: "/system.slice/docker-" + strings.Repeat("ab", 32) + ".scope", ContainerID: strings.Repeat("ab", 32)}},
		{"kubernetes pod", "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234abcd_12ab_34cd_56ef_1234567890ab.slice/cri-containerd-" + strings.Repeat("cd", 32) + ".scope\n",
			Cgroup{
				Path:        "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234abcd_12ab_34cd_56ef_1234567890ab.slice/cri-containerd-" + strings.Repeat("cd", 32) + ".scope",
				ContainerID: strings.Repeat("cd", 32), K8sPodUID: "1234abcd-12ab-34cd-56ef-1234567890ab", K8sQOSClass: "burstable",
			}},
		{"root", "0::/\n", Cgroup{Path: "/"}},
		{"garbage", "nonsense", Cgroup{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ParseCgroup(tt.content); got != tt.want {
				t.Fatalf("ParseCgroup = %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestParseStat(t *testing.T) {
	line := "1234 (a (weird) name) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 17 0 0 20 0 1 0 98765 1000000 321 18446744073709551615\n"
	s, err := ParseStat([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	if s.Comm != "a (weird) name" || s.UTime != 250 || s.STime != 17 || s.StartTime != 98765 || s.RSSPages != 321 {
		t.Fatalf("ParseStat = %+v", s)
	}
	for _, bad := range []string{"", "1 (x) S 1 2", "1 x S"} {
		if _, err := ParseStat([]byte(bad)); err == nil {
			t.Errorf("ParseStat(%q): want an error", bad)
		}
	}
}

func TestParseMaps(t *testing.T) {
	in := `55d4c8a00000-55d4c8a02000 r--p 00000000 fd:01 1234 /usr/bin/prog
55d4c8a02000-55d4c8a09000 r-xp 00002000 fd:01 1234 /usr/bin/prog
7f0000000000-7f0000001000 rwxp 00000000 00:00 0 
7f1000000000-7f1000100000 r-xp 00028000 fd:01 99 /usr/lib/x86_64-linux-gnu/libc.so.6
7ffd1000-7ffd3000 r-xp 00000000 00:00 0                          [vdso]
7f2000000000-7f2000001000 r-xp 00000000 fd:01 77 /tmp/with space (deleted)
`
	got, err := ParseMaps([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 5 {
		t.Fatalf("%d executable mappings, want 5: %+v", len(got), got)
	}
	want := Mapping{Start: 0x55d4c8a02000, Limit: 0x55d4c8a09000, Offset: 0x2000, Dev: "fd:01", Inode: 1234, Path: "/usr/bin/prog"}
	if got[0] != want {
		t.Fatalf("first mapping %+v, want %+v", got[0], want)
	}
	if got[1].Path != "" || got[3].Path != "[vdso]" || got[4].Path != "/tmp/with space (deleted)" {
		t.Fatalf("paths %q %q %q", got[1].Path, got[3].Path, got[4].Path)
	}
	if _, err := ParseMaps([]byte("zz-1 r-xp 0 0 0\n")); err == nil {
		t.Fatal("want an error for a bad range")
	}
}

func TestParseKallsyms(t *testing.T) {
	in := "ffffffff81000000 T _stext\nffffffff81000100 t do_one\nffffffff81000200 D some_data\nffffffff81000300 t mod_fn\t[ext4]\n"
	k, err := ParseKallsyms(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	for addr, want := range map[uint64]string{
		0xffffffff81000050: "_stext", 0xffffffff81000100: "do_one", 0xffffffff81000250: "do_one",
		0xffffffff81000301: "mod_fn", 0xffffffff80000000: "",
	} {
		if got := k.Resolve(addr); got != want {
			t.Errorf("Resolve(%#x) = %q, want %q", addr, got, want)
		}
	}
	if _, err := ParseKallsyms(strings.NewReader("0000000000000000 T _stext\n")); err == nil {
		t.Fatal("want an error when addresses are hidden")
	}
}

// fakeProc writes a /proc tree for processes given as pid -> cgroup file.
func fakeProc(t *testing.T, procs map[string]string) FS {
	t.Helper()
	root := t.TempDir()
	for pid, cgroup := range procs {
		dir := filepath.Join(root, pid)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		stat := pid + " (proc" + pid + ") S 1 1 1 0 -1 0 0 0 0 0 5 5 0 0 20 0 1 0 4242 0 100 0\n"
		os.WriteFile(filepath.Join(dir, "stat"), []byte(stat), 0o644)
		os.WriteFile(filepath.Join(dir, "cgroup"), []byte(cgroup), 0o644)
		os.WriteFile(filepath.Join(dir, "statm"), []byte("1000 100 50 1 0 60 0\n"), 0o644)
	}
	os.MkdirAll(filepath.Join(root, "self"), 0o755)
	return FS{Root: root}
}

func TestTargetsOnFakeProc(t *testing.T) {
	fs := fakeProc(t, map[string]string{
		"10": "0::/system.slice/opensearch.service\n",
		"11": "0::/system.slice/opensearch.service/child\n",
		"12": "0::/system.slice/kafka.service\n",
		"13": "0::/user.slice/user-0.slice/session-1.scope\n",
		"14": "0::/custom/group/a\n",
		"15": "0::/\n",
	})
	pids, err := fs.PIDs()
	if err != nil || len(pids) != 6 {
		t.Fatalf("PIDs = %v, %v", pids, err)
	}
	tests := []struct {
		name  string
		units []string
		pids  []int
		cgs   []string
		comm  string
		want  string
	}{
		{"all", nil, nil, nil, "", "10,11,12,13,14,15"},
		{"one unit and its children", []string{"opensearch.service"}, nil, nil, "", "10,11"},
		{"bare unit name", []string{"kafka"}, nil, nil, "", "12"},
		{"pids", nil, []int{13, 15}, nil, "", "13,15"},
		{"cgroup prefix", nil, nil, []string{"/custom/group"}, "", "14"},
		{"comm", nil, nil, nil, "^proc1[23]$", "12,13"},
		{"any criterion", []string{"kafka.service"}, []int{15}, nil, "", "12,15"},
		{"self excluded", nil, []int{99}, nil, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tg, err := NewTargets(tt.pids, tt.units, tt.cgs, tt.comm, 99)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, pid := range []int{10, 11, 12, 13, 14, 15} {
				info, err := fs.ReadInfo(pid)
				if err != nil {
					t.Fatal(err)
				}
				if info.StartTime != 4242 || info.Comm == "" {
					t.Fatalf("ReadInfo = %+v", info)
				}
				if tg.Match(info) {
					got = append(got, info.Comm[len("proc"):])
				}
			}
			if g := strings.Join(got, ","); g != tt.want {
				t.Fatalf("targeted %q, want %q", g, tt.want)
			}
		})
	}
	pidsOnly, _ := NewTargets([]int{10}, nil, nil, "", 99)
	if pidsOnly.ExcludedByPID(10) || !pidsOnly.ExcludedByPID(11) || !pidsOnly.ExcludedByPID(99) {
		t.Fatal("ExcludedByPID with --pids alone")
	}
	mixed, _ := NewTargets([]int{10}, []string{"kafka"}, nil, "", 99)
	if mixed.ExcludedByPID(11) {
		t.Fatal("ExcludedByPID must not decide when units are targeted too")
	}
	if rss, err := fs.RSSBytes(10); err != nil || rss != int64(100*os.Getpagesize()) {
		t.Fatalf("RSSBytes = %d, %v", rss, err)
	}
	if _, err := fs.ReadInfo(77); err == nil {
		t.Fatal("want ErrGone for a missing process")
	}
	if _, err := NewTargets(nil, nil, nil, "(", 0); err == nil {
		t.Fatal("want an error for a bad comm regexp")
	}
}

func FuzzParseMaps(f *testing.F) {
	f.Add([]byte("55d4c8a02000-55d4c8a09000 r-xp 00002000 fd:01 1234 /usr/bin/prog\n"))
	f.Add([]byte("7ffd1000-7ffd3000 r-xp 00000000 00:00 0 [vdso]\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		maps, err := ParseMaps(b)
		if err != nil {
			return
		}
		for _, m := range maps {
			_ = m.Limit - m.Start
		}
	})
}

func FuzzParseCgroup(f *testing.F) {
	f.Add("0::/system.slice/opensearch.service\n")
	f.Add("1:name=systemd:/kubepods.slice/kubepods-pod1234abcd_12ab_34cd_56ef_1234567890ab.slice/x.scope\n")
	f.Fuzz(func(t *testing.T, s string) {
		cg := ParseCgroup(s)
		if cg.SystemdUnit != "" && !isUnit(cg.SystemdUnit) {
			t.Fatalf("unit %q is not a unit name", cg.SystemdUnit)
		}
	})
}

func FuzzParseStat(f *testing.F) {
	f.Add([]byte("1234 (a (weird) name) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 17 0 0 20 0 1 0 98765 1000000 321 0\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		ParseStat(b)
	})
}

func FuzzParseKallsyms(f *testing.F) {
	f.Add("ffffffff81000000 T _stext\nffffffff81000300 t mod_fn\t[ext4]\n")
	f.Fuzz(func(t *testing.T, s string) {
		k, err := ParseKallsyms(strings.NewReader(s))
		if err == nil {
			k.Resolve(0xffffffff81000001)
		}
	})
}

func TestParseKallsymsUnordered(t *testing.T) {
	in := "ffffffffc0000100 t mod_b\t[m]\nffffffff81000000 T _stext\nffffffffc0000000 t mod_a\t[m]\n"
	k, err := ParseKallsyms(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	for addr, want := range map[uint64]string{0xffffffff81000010: "_stext", 0xffffffffc0000010: "mod_a", 0xffffffffc0000110: "mod_b"} {
		if got := k.Resolve(addr); got != want {
			t.Errorf("Resolve(%#x) = %q, want %q", addr, got, want)
		}
	}
}
