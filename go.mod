module github.com/ccab-dev/ccab

go 1.24
