package main

import (
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/version"
)

// Machine describes where and when a run measured.
type Machine struct {
	Date       string `json:"date"`
	CPU        string `json:"cpu"`
	CPUs       int    `json:"cpus"`       // usable by the bench program (its affinity mask)
	GOMAXPROCS int    `json:"gomaxprocs"` // follows the affinity mask
	Kernel     string `json:"kernel"`
	Go         string `json:"go"`
	Redis      string `json:"redis"`
	Etcd       string `json:"etcd"`
	Commit     string `json:"commit,omitempty"`
	LoadBefore string `json:"load_before"` // /proc/loadavg: 1, 5 and 15 minute averages
	LoadAfter  string `json:"load_after"`
}

func machine(commit string) Machine {
	m := Machine{
		Date:       time.Now().UTC().Format(time.RFC3339),
		CPUs:       runtime.NumCPU(),
		GOMAXPROCS: runtime.GOMAXPROCS(0),
		Go:         runtime.Version(),
		Etcd:       "v" + version.Version + " (embedded, one member, no fsync)",
		Commit:     commit,
		LoadBefore: loadavg(),
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if b, err := exec.Command("redis-server", "--version").Output(); err == nil {
		for _, f := range strings.Fields(string(b)) {
			if v, ok := strings.CutPrefix(f, "v="); ok {
				m.Redis = v
			}
		}
	}
	return m
}

// loadavg returns the first three fields of /proc/loadavg, or "".
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}
