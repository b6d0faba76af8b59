//! Kubernetes resource quantities (`8`, `500m`, `16Gi`, `1e3`), checked with the API
//! server's grammar so a bad cap is refused up front instead of by the API server
//! when the compiled ResourceQuota is applied.

/// A quantity that is not a non-negative Kubernetes quantity.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "{input:?} is not a valid quantity: expected a non-negative number with an optional suffix \
     (n, u, m, k, M, G, T, P, E, Ki, Mi, Gi, Ti, Pi, Ei or an exponent), such as 8, 500m or 16Gi"
)]
pub struct QuantityError {
    pub input: String,
}

/// Checks `input` against `<number><suffix>` (Kubernetes' `resource.ParseQuantity`),
/// refusing negative values: a negative cap is never meant.
pub fn validate_non_negative(input: &str) -> Result<(), QuantityError> {
    let err = || QuantityError {
        input: input.to_owned(),
    };
    let rest = input.strip_prefix('+').unwrap_or(input);
    let rest = number(rest).ok_or_else(err)?;
    let valid_suffix = match rest {
        "" | "n" | "u" | "m" | "k" | "M" | "G" | "T" | "P" | "E" => true,
        "Ki" | "Mi" | "Gi" | "Ti" | "Pi" | "Ei" => true,
        _ => match rest.strip_prefix(['e', 'E']) {
            // The exponent itself may be signed: 1e-3 is 1m.
            Some(exponent) => {
                let exponent = exponent.strip_prefix(['+', '-']).unwrap_or(exponent);
                !exponent.is_empty() && exponent.bytes().all(|b| b.is_ascii_digit())
            }
            None => false,
        },
    };
    if valid_suffix { Ok(()) } else { Err(err()) }
}

/// The value of a quantity that [`validate_non_negative`] accepts, as a float: close
/// enough to compare two caps, never to store one.
pub fn approximate_value(input: &str) -> Option<f64> {
    let (number, suffix) = number_and_suffix(input)?;
    let number: f64 = if number.starts_with('.') {
        format!("0{number}").parse().ok()?
    } else {
        number.trim_end_matches('.').parse().ok()?
    };
    let scale = match suffix {
        "" => 1.0,
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024f64,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        exponent => 10f64.powi(exponent[1..].parse().ok()?),
    };
    Some(number * scale)
}

/// The exact value of a quantity in nano-units (`1` is 10^9, `1m` is 10^6), rounded up
/// the way the API server rounds below its smallest unit. `None` for anything
/// [`validate_non_negative`] refuses and for values too large to hold: sums of
/// quota slices must be exact, never floats.
pub fn exact_nanos(input: &str) -> Option<i128> {
    let (number, suffix) = number_and_suffix(input)?;
    let (int, frac) = number.split_once('.').unwrap_or((number, ""));
    // value = digits × 10^(exp10 - frac.len()) × 2^(exp2), in units of 10^-9.
    let (exp10, exp2): (i32, u32) = match suffix {
        "" => (0, 0),
        "n" => (-9, 0),
        "u" => (-6, 0),
        "m" => (-3, 0),
        "k" => (3, 0),
        "M" => (6, 0),
        "G" => (9, 0),
        "T" => (12, 0),
        "P" => (15, 0),
        "E" => (18, 0),
        "Ki" => (0, 10),
        "Mi" => (0, 20),
        "Gi" => (0, 30),
        "Ti" => (0, 40),
        "Pi" => (0, 50),
        "Ei" => (0, 60),
        exponent => (exponent.get(1..)?.parse().ok()?, 0),
    };
    let digits = format!("{int}{frac}");
    let digits = digits.trim_start_matches('0');
    if digits.len() > 30 {
        return None;
    }
    let mantissa: i128 = if digits.is_empty() {
        0
    } else {
        digits.parse().ok()?
    };
    let frac_len = i32::try_from(frac.len()).ok()?;
    let scale = exp10.checked_add(9)?.checked_sub(frac_len)?;
    let scaled = if scale >= 0 {
        mantissa.checked_mul(10i128.checked_pow(u32::try_from(scale).ok()?)?)?
    } else {
        let divisor = 10i128.checked_pow(u32::try_from(-scale).ok()?)?;
        // Round up: 1.5n is 2n on the API server.
        (mantissa + divisor - 1) / divisor
    };
    scaled.checked_mul(1i128.checked_shl(exp2)?)
}

/// Writes nano-units as a quantity the API server reads back to the same value:
/// whole units without a suffix, else milli-units, else nano-units.
pub fn format_nanos(nanos: i128) -> String {
    const UNIT: i128 = 1_000_000_000;
    const MILLI: i128 = 1_000_000;
    if nanos % UNIT == 0 {
        format!("{}", nanos / UNIT)
    } else if nanos % MILLI == 0 {
        format!("{}m", nanos / MILLI)
    } else {
        format!("{nanos}n")
    }
}

/// A valid quantity split into its number and its suffix (`"1.5"`, `"Gi"`).
fn number_and_suffix(input: &str) -> Option<(&str, &str)> {
    validate_non_negative(input).ok()?;
    let rest = input.strip_prefix('+').unwrap_or(input);
    let split = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(rest.len());
    Some(rest.split_at(split))
}

/// Consumes `digits`, `digits.digits`, `digits.` or `.digits`; returns the rest.
fn number(s: &str) -> Option<&str> {
    let int = s.bytes().take_while(u8::is_ascii_digit).count();
    let rest = &s[int..];
    let (frac, rest) = match rest.strip_prefix('.') {
        Some(after) => {
            let frac = after.bytes().take_while(u8::is_ascii_digit).count();
            (frac, &after[frac..])
        }
        None => (0, rest),
    };
    (int + frac > 0).then_some(rest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_server_quantities_are_accepted() {
        for ok in [
            "8", "8000m", "0.5", ".5", "5.", "16Gi", "1Ki", "2E", "1e3", "1E-3", "+1", "0", "100n",
            "5u",
        ] {
            assert_eq!(validate_non_negative(ok), Ok(()), "{ok}");
        }
    }

    #[test]
    fn values_compare_across_suffixes() {
        let v = |q| approximate_value(q).unwrap();
        assert_eq!(v("500m"), 0.5);
        assert_eq!(v("8"), 8.0);
        assert_eq!(v(".5"), 0.5);
        assert_eq!(v("5."), 5.0);
        assert_eq!(v("1e3"), 1000.0);
        assert_eq!(v("1E-3"), 0.001);
        assert_eq!(v("16Gi"), 16.0 * 1024.0 * 1024.0 * 1024.0);
        assert!(v("128Mi") < v("1G"));
        assert!(v("1Gi") > v("1G"));
        assert_eq!(approximate_value("lots"), None);
    }

    #[test]
    fn exact_values_are_exact_and_round_trip() {
        let n = |q: &str| exact_nanos(q).unwrap();
        assert_eq!(n("1"), 1_000_000_000);
        assert_eq!(n("500m"), 500_000_000);
        assert_eq!(n("0.5"), n("500m"));
        assert_eq!(n(".5"), n("500m"));
        assert_eq!(n("5."), n("5"));
        assert_eq!(n("1e3"), n("1k"));
        assert_eq!(n("1E-3"), n("1m"));
        assert_eq!(n("1Ki"), 1024 * n("1"));
        assert_eq!(n("1.5Gi"), 3 * 512 * 1024 * 1024 * n("1"));
        assert_eq!(n("1.5n"), 2, "rounded up like the API server");
        assert_eq!(n("0"), 0);
        assert_eq!(n("000"), 0);
        assert_eq!(exact_nanos("-1"), None);
        assert_eq!(exact_nanos("1e400"), None);
        assert_eq!(exact_nanos("99999999999999999999999999999999999E"), None);
        for q in ["1", "250m", "3n", "16Gi", "1.5", "7k"] {
            assert_eq!(n(&format_nanos(n(q))), n(q), "{q}");
        }
        assert_eq!(format_nanos(n("16Gi")), "17179869184");
        assert_eq!(format_nanos(n("1.5")), "1500m");
    }

    #[test]
    fn garbage_and_negative_caps_are_refused() {
        for bad in [
            "", "lots", "-1", "1GB", "1gi", "Gi", ".", "1..2", "1e", "1e+", "1 Gi", "1Mi ",
        ] {
            let err = validate_non_negative(bad).unwrap_err();
            assert!(err.to_string().contains("such as 8, 500m or 16Gi"), "{bad}");
        }
    }
}
