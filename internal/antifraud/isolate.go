package antifraud

func isDataError(err error) bool { return false }
