package mutants

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// A Scratch is a throw-away copy of the repository that one mutant is applied to and
// built in. The copy is made from the files git would commit now (tracked files as they
// are on disk, and untracked files that are not ignored), so the suite tests the
// checkout's current state, never touches the checkout itself, and needs no git
// worktree bookkeeping.
type Scratch struct {
	// Dir is the root of the copy.
	Dir string
}

// NewScratch copies the repository at root into a new temporary directory. Remove it
// when done.
func NewScratch(ctx context.Context, root string) (*Scratch, error) {
	cmd := exec.CommandContext(ctx, "git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("list the repository's files: %w", err)
	}
	dir, err := os.MkdirTemp("", "mutant-*")
	if err != nil {
		return nil, fmt.Errorf("create scratch directory: %w", err)
	}
	s := &Scratch{Dir: dir}
	for name := range strings.SplitSeq(strings.TrimSuffix(string(out), "\x00"), "\x00") {
		if err := copyFile(filepath.Join(root, name), filepath.Join(dir, name)); err != nil {
			s.Remove()
			return nil, err
		}
	}
	return s, nil
}

// copyFile copies one regular file or symbolic link. A tracked file deleted from the
// working tree is skipped: the copy reflects the checkout as it is.
func copyFile(src, dst string) error {
	info, err := os.Lstat(src)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("copy %s: %w", src, err)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return fmt.Errorf("copy %s: %w", src, err)
	}
	if info.Mode()&os.ModeSymlink != 0 {
		target, err := os.Readlink(src)
		if err != nil {
			return fmt.Errorf("copy %s: %w", src, err)
		}
		return os.Symlink(target, dst)
	}
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("copy %s: %w", src, err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, info.Mode().Perm())
	if err != nil {
		return fmt.Errorf("copy %s: %w", src, err)
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copy %s: %w", src, err)
	}
	if err := out.Close(); err != nil {
		return fmt.Errorf("copy %s: %w", src, err)
	}
	return nil
}

// Apply applies the patch at path to the copy: all of it or, if any hunk does not
// apply, none of it (git apply --check first).
func (s *Scratch) Apply(ctx context.Context, path string) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return fmt.Errorf("apply %s: %w", path, err)
	}
	for _, args := range [][]string{{"apply", "--check", abs}, {"apply", abs}} {
		if err := s.run(ctx, "git", args...); err != nil {
			return fmt.Errorf("git apply %s: %w", filepath.Base(path), err)
		}
	}
	return nil
}

// Build compiles the two services of the copy into its bin/ and returns their paths
// keyed by package, as harness.Options.Binaries wants them. One go build links both in
// parallel.
func (s *Scratch) Build(ctx context.Context) (map[string]string, error) {
	binDir := filepath.Join(s.Dir, "bin")
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		return nil, fmt.Errorf("create %s: %w", binDir, err)
	}
	if err := s.run(ctx, "go", "build", "-o", binDir+string(filepath.Separator), "./cmd/api", "./cmd/consumer"); err != nil {
		return nil, fmt.Errorf("go build: %w", err)
	}
	return map[string]string{
		"./cmd/api":      filepath.Join(binDir, "api"),
		"./cmd/consumer": filepath.Join(binDir, "consumer"),
	}, nil
}

// run runs a command in the copy. GIT_CEILING_DIRECTORIES keeps git from finding a
// repository above the copy, so git apply patches the copy's files as plain files.
func (s *Scratch) run(ctx context.Context, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = s.Dir
	cmd.Env = append(os.Environ(), "GIT_CEILING_DIRECTORIES="+filepath.Dir(s.Dir))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%w\n%s", err, bytes.TrimSpace(out.Bytes()))
	}
	return nil
}

// Remove deletes the copy and everything built in it.
func (s *Scratch) Remove() error {
	if err := os.RemoveAll(s.Dir); err != nil {
		return fmt.Errorf("remove scratch copy: %w", err)
	}
	return nil
}
