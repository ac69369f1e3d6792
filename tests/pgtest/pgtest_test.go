package pgtest

import (
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dsync-dev/dsync/internal/testenv/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m) }

// TestServer: the cluster serves SQL on its port, as a user other than
// root, and Close removes every trace of it.
func TestServer(t *testing.T) {
	s, err := StartServer(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("pgx", s.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	var user, dir string
	err = db.QueryRowContext(t.Context(), "SELECT current_user, current_setting('data_directory')").Scan(&user, &dir)
	_ = db.Close()
	if err != nil {
		t.Fatal(err)
	}
	if user != superuser || dir != filepath.Join(s.dir, "data") {
		t.Errorf("connected as %q to the cluster in %s, want %q in %s/data", user, dir, superuser, s.dir)
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if uids, ok := strings.CutPrefix(line, "Uid:"); ok {
			t.Logf("postgres runs with uids %s (we run as %d)", strings.Join(strings.Fields(uids), " "), os.Geteuid())
			if strings.Fields(uids)[1] == "0" {
				t.Errorf("postgres runs as root")
			}
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(s.dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s left after Close: %v", s.dir, err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// TestNotInstalled: without the binaries, a start fails saying how to
// install them.
func TestNotInstalled(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	defer func(g string) { globDirs = g }(globDirs)
	globDirs = "/nonexistent/*/bin"
	_, err := StartServer(t.Context())
	if !errors.Is(err, ErrNotInstalled) {
		t.Fatalf("StartServer without binaries: %v, want ErrNotInstalled", err)
	}
	t.Logf("%v", err)
}
