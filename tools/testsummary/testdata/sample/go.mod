module example.com/tsample

go 1.26.0
