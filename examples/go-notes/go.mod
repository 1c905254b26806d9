module zotbox.invalid/examples/go-notes

go 1.24
