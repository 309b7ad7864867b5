module sundial.example/workers

go 1.19
