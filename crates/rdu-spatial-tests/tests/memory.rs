//! Memory accounting: bytes per storage format and placement in HBM then DDR.

use rdu_spatial::chip::Chip;
use rdu_spatial::cost::CostError;
use rdu_spatial::memory::{place, stored_bytes, stored_format, tensor_bytes, MemoryDemand, TensorFormat};
use rdu_spatial::program::{Role, Storage};

#[test]
fn bytes_per_format() {
    assert_eq!(tensor_bytes(&[4096, 4096], TensorFormat::Q8_0).unwrap(), 4096 * 4096 / 32 * 34);
    assert_eq!(tensor_bytes(&[4096, 4096], TensorFormat::DenseBf16).unwrap(), 4096 * 4096 * 2);
    assert_eq!(tensor_bytes(&[8, 128, 64], TensorFormat::F32).unwrap(), 8 * 128 * 64 * 4);
    assert_eq!(tensor_bytes(&[], TensorFormat::F32).unwrap(), 4, "a scalar is one element");
    assert_eq!(tensor_bytes(&[64, 48], TensorFormat::Q8_0), Err(CostError::Q8Misaligned { shape: vec![64, 48] }));
    assert!(matches!(tensor_bytes(&[1 << 40, 1 << 40], TensorFormat::F32), Err(CostError::TooLarge { .. })));
}

#[test]
fn a_declaration_is_counted_as_it_is_stored() {
    assert_eq!(stored_format(Role::Weight, Storage::Q8_0), TensorFormat::Q8_0);
    assert_eq!(stored_format(Role::Weight, Storage::Dense), TensorFormat::DenseBf16, "dense weights are held bf16");
    assert_eq!(stored_format(Role::Shared, Storage::Dense), TensorFormat::DenseBf16);
    assert_eq!(stored_format(Role::State, Storage::Bf16), TensorFormat::DenseBf16);
    assert_eq!(stored_format(Role::State, Storage::Dense), TensorFormat::F32, "an f32 state is 4 bytes an element");
    assert_eq!(stored_format(Role::Temp, Storage::Dense), TensorFormat::F32);
    assert_eq!(stored_bytes(&[64, 64], Role::Weight, Storage::Q8_0).unwrap(), 64 * 2 * 34);
    assert_eq!(stored_bytes(&[16, 2, 8], Role::State, Storage::Dense).unwrap(), 16 * 2 * 8 * 4);
    assert_eq!(
        stored_bytes(&[64, 48], Role::Weight, Storage::Q8_0),
        Err(CostError::Q8Misaligned { shape: vec![64, 48] })
    );
}

#[test]
fn demand_lands_in_hbm_then_ddr() {
    let chip = Chip::builtin("sn50").unwrap();
    let mut demand = MemoryDemand::default();
    demand.add_weight(&[4096, 4096], TensorFormat::Q8_0).unwrap();
    demand.add_state(&[4096, 8, 128], TensorFormat::F32).unwrap();
    assert_eq!(demand, MemoryDemand { weight_bytes: 4096 * 128 * 34, state_bytes: 4096 * 8 * 128 * 4 });
    demand.add_state(&[4096, 8, 128], TensorFormat::DenseBf16).unwrap();
    assert_eq!(demand.state_bytes, 4096 * 8 * 128 * (4 + 2), "a bf16 state is 2 bytes an element");
    let fit = place(&chip, demand);
    assert!(fit.fits && !fit.spills_to_ddr);
    assert_eq!((fit.hbm_bytes, fit.ddr_bytes, fit.shortfall), (demand.total(), 0, 0));

    let big = MemoryDemand { weight_bytes: 100_000_000_000, state_bytes: 10_000_000_000 };
    let fit = place(&chip, big);
    assert!(fit.fits && fit.spills_to_ddr);
    assert_eq!((fit.hbm_bytes, fit.ddr_bytes), (64_000_000_000, 46_000_000_000));

    let huge = MemoryDemand { weight_bytes: 3_000_000_000_000, state_bytes: 0 };
    let fit = place(&chip, huge);
    assert!(!fit.fits);
    assert_eq!(fit.shortfall, 3_000_000_000_000 - 64_000_000_000 - 2_000_000_000_000);
    assert_eq!((fit.hbm_capacity, fit.ddr_capacity), (chip.hbm_bytes, chip.ddr_bytes));
}
