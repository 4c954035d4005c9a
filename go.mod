module github.com/ccab-dev/ccab

go 1.24.0

require golang.org/x/sys v0.40.0
