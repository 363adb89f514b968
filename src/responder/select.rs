//! Which served device answers a session request: [`select_device`].

use thiserror::Error;

/// What [`select_device`] knows of a served device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceRail<'a> {
    pub name: &'a str,
    pub rail: Option<u16>,
}

/// Why no served device fits a session request (sent to the prober as `no_device`).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SelectError {
    #[error("device {wanted} is not served here; this responder serves {}", .served.join(", "))]
    NotServed { wanted: String, served: Vec<String> },
    #[error("no device on rail {rail}; {}", serves_rails(.rails))]
    NoRail { rail: u16, rails: Vec<u16> },
    #[error("this responder serves no device")]
    Empty,
}

fn serves_rails(rails: &[u16]) -> String {
    if rails.is_empty() {
        return "this responder's devices have no rail (ask without one)".to_owned();
    }
    let list: Vec<String> = rails.iter().map(u16::to_string).collect();
    let noun = if rails.len() == 1 { "rail" } else { "rails" };
    format!("this responder serves {noun} {}", list.join(", "))
}

/// The index in `served` of the device that answers a session request for `device` on `rail`:
/// the named device if it is served (a named device that is not is refused, whatever the rail);
/// else the device on `rail` (refused when no device is on it); else, when the request names
/// neither, the first device.
pub fn select_device(
    served: &[DeviceRail<'_>],
    device: Option<&str>,
    rail: Option<u16>,
) -> Result<usize, SelectError> {
    if served.is_empty() {
        return Err(SelectError::Empty);
    }
    if let Some(wanted) = device {
        return served.iter().position(|d| d.name == wanted).ok_or_else(|| {
            SelectError::NotServed {
                wanted: wanted.to_owned(),
                served: served.iter().map(|d| d.name.to_owned()).collect(),
            }
        });
    }
    if let Some(rail) = rail {
        return served
            .iter()
            .position(|d| d.rail == Some(rail))
            .ok_or_else(|| SelectError::NoRail {
                rail,
                rails: served.iter().filter_map(|d| d.rail).collect(),
            });
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn served<'a>(devices: &[(&'a str, Option<u16>)]) -> Vec<DeviceRail<'a>> {
        devices
            .iter()
            .map(|&(name, rail)| DeviceRail { name, rail })
            .collect()
    }

    #[test]
    fn a_named_device_is_used_if_served_and_refused_if_not() {
        let two = served(&[("mlx5_0", Some(0)), ("mlx5_1", Some(1))]);
        assert_eq!(select_device(&two, Some("mlx5_1"), None), Ok(1));
        // The name wins over the rail.
        assert_eq!(select_device(&two, Some("mlx5_1"), Some(0)), Ok(1));
        let e = select_device(&two, Some("mlx5_7"), Some(0)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "device mlx5_7 is not served here; this responder serves mlx5_0, mlx5_1"
        );
    }

    #[test]
    fn a_rail_picks_the_device_on_it_and_a_rail_nobody_serves_is_refused() {
        let two = served(&[("mlx5_0", Some(0)), ("mlx5_1", Some(1))]);
        assert_eq!(select_device(&two, None, Some(0)), Ok(0));
        assert_eq!(select_device(&two, None, Some(1)), Ok(1));
        let e = select_device(&two, None, Some(3)).unwrap_err();
        assert_eq!(
            e,
            SelectError::NoRail {
                rail: 3,
                rails: vec![0, 1]
            }
        );
        assert_eq!(
            e.to_string(),
            "no device on rail 3; this responder serves rails 0, 1"
        );
        let one = served(&[("rxe0", Some(2))]);
        assert_eq!(
            select_device(&one, None, Some(0)).unwrap_err().to_string(),
            "no device on rail 0; this responder serves rail 2"
        );
        let no_rails = served(&[("rxe0", None)]);
        assert_eq!(
            select_device(&no_rails, None, Some(0))
                .unwrap_err()
                .to_string(),
            "no device on rail 0; this responder's devices have no rail (ask without one)"
        );
    }

    #[test]
    fn neither_device_nor_rail_gets_the_first_device() {
        let two = served(&[("rxe1", Some(5)), ("rxe0", Some(4))]);
        assert_eq!(select_device(&two, None, None), Ok(0));
        assert_eq!(select_device(&served(&[("rxe0", None)]), None, None), Ok(0));
        assert_eq!(select_device(&[], None, None), Err(SelectError::Empty));
        assert_eq!(
            select_device(&[], Some("rxe0"), Some(1)),
            Err(SelectError::Empty)
        );
    }
}
