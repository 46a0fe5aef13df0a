//go:build !linux

package hugeheap

func mode() string { return "" }

func reserve(int64) Result {
	return Result{Why: "transparent huge pages are a Linux feature"}
}
