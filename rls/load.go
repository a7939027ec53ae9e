package rls

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// MaxFileBytes bounds one configuration file.
const MaxFileBytes = 16 << 20

// Load reads and parses the configuration at path: a YAML file, or a
// directory whose *.yaml and *.yml files, in name order, are each one
// domain. A directory is not read recursively, and names starting with
// '.' are skipped (editors' swap files; a Kubernetes ConfigMap's ..data).
func Load(path string) (*Config, error) {
	files, err := readFiles(path)
	if err != nil {
		return nil, err
	}
	return Parse(files)
}

// readFiles reads the files Load parses, symbolic links followed.
func readFiles(path string) ([]File, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("rls: %w", err)
	}
	if !st.IsDir() {
		data, err := readFile(path)
		if err != nil {
			return nil, err
		}
		return []File{{Name: path, Data: data}}, nil
	}
	entries, err := os.ReadDir(path) // sorted by name
	if err != nil {
		return nil, fmt.Errorf("rls: %w", err)
	}
	var files []File
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") || (filepath.Ext(name) != ".yaml" && filepath.Ext(name) != ".yml") {
			continue
		}
		full := filepath.Join(path, name)
		st, err := os.Stat(full)
		if err != nil {
			return nil, fmt.Errorf("rls: %w", err)
		}
		if !st.Mode().IsRegular() {
			continue
		}
		data, err := readFile(full)
		if err != nil {
			return nil, err
		}
		files = append(files, File{Name: full, Data: data})
	}
	return files, nil
}

func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("rls: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("rls: %s: %w", path, err)
	}
	if len(data) > MaxFileBytes {
		return nil, fmt.Errorf("rls: %s: larger than %d bytes", path, MaxFileBytes)
	}
	return data, nil
}
