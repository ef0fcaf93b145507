package testenv

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ProcState is the state letter of pid in /proc (S sleeping, T stopped, Z zombie...),
// "" when there is no such process.
func ProcState(pid int) string {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return ""
	}
	// The state follows the command name in parentheses: "123 (sleep) S ...".
	fields := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(fields) == 0 {
		return ""
	}
	return fields[0]
}
