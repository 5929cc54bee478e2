module snapgo

go 1.22
