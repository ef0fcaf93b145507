package payment

import (
	"slices"
	"strings"
)

// currencies are the active ISO 4217 codes of circulating currencies (ISO 4217
// Table A.1, 2025 edition, as published by the maintenance agency SIX).
//
// Left out on purpose, because nobody pays in them: fund codes (BOV, CHE, CHW, CLF,
// COU, MXV, USN, UYI, UYW), precious metals (XAU, XAG, XPD, XPT), bond-market units
// (XBA-XBD), XDR, XSU, XUA, and the testing and "no currency" codes XTS and XXX.
// Withdrawn codes (HRK, SLL, ZWL, ANG, CUC, ...) are absent too.
//
// It is a read-only lookup table, built once; nothing writes to it.
var currencies = setOf(`
	AED AFN ALL AMD AOA ARS AUD AWG AZN BAM BBD BDT BHD BIF BMD BND BOB BRL BSD BTN
	BWP BYN BZD CAD CDF CHF CLP CNY COP CRC CUP CVE CZK DJF DKK DOP DZD EGP ERN ETB
	EUR FJD FKP GBP GEL GHS GIP GMD GNF GTQ GYD HKD HNL HTG HUF IDR ILS INR IQD IRR
	ISK JMD JOD JPY KES KGS KHR KMF KPW KRW KWD KYD KZT LAK LBP LKR LRD LSL LYD MAD
	MDL MGA MKD MMK MNT MOP MRU MUR MVR MWK MXN MYR MZN NAD NGN NIO NOK NPR NZD OMR
	PAB PEN PGK PHP PKR PLN PYG QAR RON RSD RUB RWF SAR SBD SCR SDG SEK SGD SHP SLE
	SOS SRD SSP STN SVC SYP SZL THB TJS TMT TND TOP TRY TTD TWD TZS UAH UGX USD UYU
	UZS VED VES VND VUV WST XAF XCD XCG XOF XPF YER ZAR ZMW ZWG
`)

func setOf(codes string) map[string]struct{} {
	set := make(map[string]struct{})
	for _, c := range strings.Fields(codes) {
		set[c] = struct{}{}
	}
	return set
}

// Currencies returns the accepted currency codes, sorted. docs/openapi.yaml lists the
// same codes as the enum of a payment's currency, and docs/openapi_test.go fails when
// the two lists differ, so that a client reading the spec is never refused a code it
// allows (or offered one the server refuses).
func Currencies() []string {
	codes := make([]string, 0, len(currencies))
	for c := range currencies {
		codes = append(codes, c)
	}
	slices.Sort(codes)
	return codes
}

// isCurrency reports whether code is in the list, exactly: "eur" is not a code.
func isCurrency(code string) bool {
	_, ok := currencies[code]
	return ok
}
