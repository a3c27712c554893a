package main
import (
 _ "golang.org/x/sys/unix"
 _ "github.com/google/pprof/profile"
 _ "github.com/ianlancetaylor/demangle"
 _ "github.com/klauspost/compress/zstd"
 _ "github.com/spf13/cobra"
)
func main(){}
