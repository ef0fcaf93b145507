module github.com/dscourse/payments-outbox

go 1.26.8
