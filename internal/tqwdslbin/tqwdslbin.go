package tqwdslbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// Env names the environment variable that holds the path of a tqw-dsl
// binary already built from this checkout.
const Env = "TQW_TEST_TQW_DSL"

// Path returns the binary named by Env when it is set, and otherwise
// builds github.com/tqw-dsl/tqw/cmd/tqw-dsl into dir and returns its path.
// Env naming a missing file is an error, not a silent rebuild: it means
// the script that set it went wrong.
func Path(dir string) (string, error) {
	if p := os.Getenv(Env); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%s=%s: %w (unset it to build tqw-dsl in the test)", Env, p, err)
		}
		return p, nil
	}
	bin := filepath.Join(dir, "tqw-dsl")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/tqw-dsl/tqw/cmd/tqw-dsl").CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build tqw-dsl: %w\n%s", err, out)
	}
	return bin, nil
}
