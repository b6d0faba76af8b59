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
    validate_non_negative(input).ok()?;
    let rest = input.strip_prefix('+').unwrap_or(input);
    let split = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(rest.len());
    let (number, suffix) = rest.split_at(split);
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
    fn garbage_and_negative_caps_are_refused() {
        for bad in [
            "", "lots", "-1", "1GB", "1gi", "Gi", ".", "1..2", "1e", "1e+", "1 Gi", "1Mi ",
        ] {
            let err = validate_non_negative(bad).unwrap_err();
            assert!(err.to_string().contains("such as 8, 500m or 16Gi"), "{bad}");
        }
    }
}
